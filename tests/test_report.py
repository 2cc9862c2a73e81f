"""`bsm report`: what each panel plots, read back from the page; the issue-26 defects (a band
past MFU 1, a 14x-off prediction squashing the series, saves read from the disk, no lr or grad
norm panel, a self-contradicting legend, a headerless column, minutes for a one-minute run); the
overlay of several runs; its bad input through the real command.

And the page as a person sees it: Debian's Chromium, headless, lays out the overlay report; the
test takes a screenshot, parses each inline SVG, and measures every element's box in the
browser: nothing off the page, nothing outside its figure, no horizontal scroll, at a desktop
width and at a narrow one. `make browser` installs Debian's `chromium` when it is missing
(`make test` runs it first); elsewhere the browser test skips, saying how to get it, except under
CI (`CI` set), where a missing browser is a failure."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from cli_support import run
from train_support import local_plan

from blackwell_sm.opt_ml import OptMl
from blackwell_sm.planner.plan import Plan
from blackwell_sm.records import (
    SaveRecord,
    StartRecord,
    StopRecord,
    TrainRecord,
    ValRecord,
    to_json,
)

pytest.importorskip("matplotlib")

T0 = 1_764_000_000.0


def history(plan: Plan, *, tok_factor: float = 1.0, dt: float = 1.0) -> list:
    """Two launches: steps 1-8 with saves at 2, 4, 6, 8 and a stop at 8; then a resume from the
    step-6 checkpoint (as if 8's upload was lost) and steps 7-12 with saves at 10, 12."""
    tok = plan.throughput.tokens_per_s_per_gpu * tok_factor

    def train(step: int, t: float) -> TrainRecord:
        return TrainRecord(
            step=step,
            loss=3.0 - step / 10,
            lr=1e-3 * min(1.0, step / 2),
            grad_norm=8.0 / step,
            tok_s_gpu=tok * (1 + step / 1000),
            mfu=0.2,
            step_time_s=dt,
            mem_alloc_gib=0.3,
            mem_reserved_gib=0.4,
            memory_kind="cpu_max_rss",
            time=t,
        )

    recs: list = [StartRecord(step=0, world_size=2, time=T0)]
    for s in range(1, 9):
        recs.append(train(s, T0 + s * dt))
        if s % 2 == 0:
            recs.append(SaveRecord(step=s, checkpoint=f"step-{s:08d}", time=T0 + s * dt + 0.1))
    recs.append(ValRecord(step=8, loss=2.5, time=T0 + 8.2 * dt))
    recs.append(StopRecord(step=8, reason="SIGTERM", time=T0 + 8.5 * dt))
    t1 = T0 + 20 * dt
    recs.append(
        StartRecord(step=6, resumed_from_step=6, checkpoint="step-00000006", world_size=2, time=t1)
    )
    for s in range(7, 13):
        recs.append(train(s, t1 + (s - 6) * dt))
        if s % 2 == 0:
            recs.append(SaveRecord(step=s, checkpoint=f"step-{s:08d}", time=t1 + (s - 6) * dt))
    return recs


def run_dir(root: Path, plan: Plan | None = None, **kw) -> Path:
    plan = plan or local_plan(steps=12)
    root.mkdir(parents=True, exist_ok=True)
    (root / "plan.json").write_text(plan.to_json())
    tree = OptMl(root)
    tree.output_data.mkdir(parents=True, exist_ok=True)
    tree.metrics.write_text("".join(to_json(r) + "\n" for r in history(plan, **kw)))
    return root


def report(*runs: Path, out: Path) -> tuple[dict, str]:
    """`bsm report RUN... --out OUT -o json` through the CLI: (plot data, page)."""
    from blackwell_sm.runs.report import read_plot_data

    code, stdout, err = run("report", *map(str, runs), "--out", str(out), "-o", "json")
    assert code == 0, err + stdout
    page = Path(json.loads(stdout)["report"]).read_text()
    return read_plot_data(page), page


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    """One run's report (matplotlib costs ~1 s a report: the tests share it)."""
    tmp = tmp_path_factory.mktemp("single")
    return report(run_dir(tmp / "run"), out=tmp / "r.html")


@pytest.fixture(scope="module")
def overlay(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    """Before and after calibration, overlaid: the second 14x faster than predicted (a log
    axis) and 90 s a step (minutes on the time axis)."""
    tmp = tmp_path_factory.mktemp("overlay")
    a = run_dir(tmp / "before-calibration")
    b = run_dir(tmp / "after-calibration", tok_factor=14.0, dt=90.0)
    data, page = report(a, b, out=tmp / "both.html")
    return tmp, data, page


def test_lr_and_grad_norm_panels_plot_the_log(single):
    data, page = single
    train = [r for r in history(local_plan(steps=12)) if isinstance(r, TrainRecord)]
    opt = data["optimizer"]
    assert opt["learning rate"]["y"] == [r.lr for r in train]
    assert opt["gradient norm"]["y"] == [r.grad_norm for r in train]
    assert set(opt["clip threshold (optimizer.grad_clip)"]["y"]) == {1.0}
    assert page.count("<svg") == 5
    for words in (
        "learning rate",
        "L2 norm (before clipping)",
        "tokens/s per GPU",
        "GiB per GPU",
        "MFU (fraction of dense BF16 peak)",
        "nats/token",
    ):
        assert words in page, words


def test_saves_stops_and_resumes_come_from_the_log_not_the_disk(single):
    """Nothing is on disk (keep_last would have left two): every save of the log is drawn, the
    stop where it was logged, the resume at the step its start record resumed from."""
    data, _ = single
    tl = data["timeline"]
    assert tl["checkpoint save"]["y"] == [2.0, 4.0, 6.0, 8.0, 8.0, 10.0, 12.0]  # 8 twice
    assert tl["stop"]["y"] == [8.0]
    assert tl["resume"]["y"] == [6.0]
    assert tl["resume"]["x"] == [20.0]  # seconds since the first record
    assert "launch ended (killed or failed)" not in tl


def test_seconds_for_a_short_run_minutes_for_a_longer_one(single, overlay):
    from blackwell_sm.runs.report_timeline import time_unit

    assert "time since the run's first record (s)" in single[1]
    assert "time since the run's first record (min)" in overlay[2]
    assert [time_unit(s)[0] for s in (59, 179, 180, 3 * 3600 - 1, 3 * 3600)] == [
        "s",
        "s",
        "min",
        "min",
        "h",
    ]


def _speed_axes(plan: Plan, tmp_path: Path, **kw):
    from blackwell_sm.runs.report import load_run
    from blackwell_sm.runs.report_figures import speed_figure

    fig = speed_figure([load_run(str(run_dir(tmp_path / "run", plan, **kw)))])
    return fig.axes


def test_the_mfu_band_stops_at_1_and_the_tokens_band_at_mfu_1(tmp_path):
    base = local_plan(steps=12)
    t = base.throughput.model_copy(update={"mfu": 0.9})
    p = t.tokens_per_s_per_gpu
    t = t.model_copy(update={"tokens_per_s_per_gpu_range": (0.5 * p, 1.35 * p)})
    plan = base.model_copy(update={"throughput": t})
    ax, ax2 = _speed_axes(plan, tmp_path)
    (band,) = ax2.collections
    assert band.get_paths()[0].vertices[:, 1].max() == 1.0
    (tok_band,) = ax.collections
    assert tok_band.get_paths()[0].vertices[:, 1].max() == pytest.approx(p / 0.9)
    assert "clipped at what is possible" in tok_band.get_label()


def test_a_prediction_14x_off_gets_a_log_axis_that_says_so(tmp_path):
    ax, _ = _speed_axes(local_plan(steps=12), tmp_path, tok_factor=14.0)
    assert ax.get_yscale() == "log"
    assert "log axis: measured is 14" in ax.get_title()
    ax, _ = _speed_axes(local_plan(steps=12), tmp_path / "near", tok_factor=2.5)
    assert ax.get_yscale() == "linear" and "log" not in ax.get_title()


def test_the_range_legend_names_its_basis_without_contradiction(single, tmp_path):
    from blackwell_sm.runs.report import load_run
    from blackwell_sm.runs.report_figures import range_label

    _, page = single
    assert "predicted range (measured)" not in page and "(measured)" not in page
    run = load_run(str(run_dir(tmp_path / "run")))
    want = "prediction's range -35%/+35% (step-time constants timed on this machine)"
    assert range_label(run) == want


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[tuple[str, str]]] = []
        self.cell: tuple[str, list[str]] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.cell = (tag, [])

    def handle_data(self, data):
        if self.cell is not None:
            self.cell[1].append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append((self.cell[0], "".join(self.cell[1]).strip()))
            self.cell = None


def test_every_table_column_has_a_header_and_a_unit(single):
    _, page = single
    p = _Tables()
    p.feed(page)
    header, *rows = p.rows
    assert [k for k, _ in header] == ["th"] * 6 and all(text for _, text in header)
    assert [t for _, t in header][:2] == ["figure", "unit"]
    assert len(rows) == 4 and all(len(r) == 6 and r[1][1] for r in rows), rows


def test_several_runs_overlay_on_every_panel(overlay):
    """Before and after calibration: each run's lines carry its label; a table per run."""
    _, data, page = overlay
    for fig, base in (
        ("loss", "train loss"),
        ("speed", "measured tokens/s/GPU"),
        ("memory", "measured peak memory"),
        ("optimizer", "learning rate"),
        ("timeline", "checkpoint save"),
    ):
        want = {f"{base}: before-calibration", f"{base}: after-calibration"}
        assert want <= set(data[fig]), (fig, list(data[fig]))
    ratio = [
        x / y
        for x, y in zip(
            data["speed"]["measured tokens/s/GPU: after-calibration"]["y"],
            data["speed"]["measured tokens/s/GPU: before-calibration"]["y"],
            strict=True,
        )
    ]
    assert ratio == pytest.approx([14.0] * 14)
    assert "log axis: measured is 14" in page
    assert page.count("<table>") == 2 and "2 runs overlaid" in page


def test_two_runs_with_one_folder_name_get_distinct_labels(tmp_path):
    from blackwell_sm.runs.report import run_labels

    assert run_labels(["x/run", "y/run"]) == ["x/run", "y/run"]
    assert run_labels(["a/run", "b/other"]) == ["run", "other"]
    assert run_labels(["a", "a"]) == ["1: a", "2: a"]


@pytest.mark.parametrize(
    ("make", "field", "words"),
    [
        (lambda d: [str(d), str(d.parent / "missing")], "RUN_DIR|JOB", "neither an existing run"),
        (lambda d: [str(d)] * 11, "RUN_DIR|JOB", "at most 10"),
        (lambda d: [str(d), str(d.parent)], "RUN_DIR|JOB", "no plan.json"),
    ],
)
def test_bad_runs_in_an_overlay_are_refused_naming_them(tmp_path, make, field, words):
    d = run_dir(tmp_path / "run")
    (tmp_path / "missing").parent.mkdir(exist_ok=True)
    code, out, err = run("report", *make(d), "--out", str(tmp_path / "x.html"), "-o", "json")
    assert code == 2, out + err
    error = json.loads(out)["error"]
    assert error["field"] == field and words in error["message"], error
    assert "Traceback" not in err and not (tmp_path / "x.html").exists()


def test_no_run_is_a_usage_error():
    code, out, err = run("report", "-o", "json")
    assert code == 2 and "Traceback" not in err
    assert json.loads(out)["error"]["code"] == "usage"


# ---------------------------------------------------------------------------------------------
# In a headless browser
# ---------------------------------------------------------------------------------------------

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
SVG_NS = "{http://www.w3.org/2000/svg}"

# Run in the page after layout: every drawn SVG element's box, against its figure and the page.
# Elements under a clip-path are clipped to their axes (which are themselves checked).
MEASURE = """<script>
(() => {
  const W = document.documentElement.clientWidth;
  const out = {width: W, scrollWidth: document.documentElement.scrollWidth, figures: []};
  document.querySelectorAll('.fig svg').forEach(svg => {
    const s = svg.getBoundingClientRect();
    const fig = {id: svg.closest('.fig').id, box: [s.left, s.top, s.right, s.bottom],
                 drawn: 0, texts: 0, off: []};
    svg.querySelectorAll('path, use, text, rect, line, polyline, polygon').forEach(el => {
      if (el.closest('defs, clipPath, [clip-path]')) return;
      const r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) return;
      fig.drawn += 1;
      if (el.tagName === 'text') fig.texts += 1;
      const outside = r.left < s.left - 0.5 || r.right > s.right + 0.5 || r.top < s.top - 0.5
        || r.bottom > s.bottom + 0.5 || r.left < 0 || r.right > W + 0.5;
      if (outside) fig.off.push([el.tagName, el.textContent.slice(0, 40), r.left, r.top,
                                 r.right, r.bottom]);
    });
    out.figures.push(fig);
  });
  const pre = document.createElement('pre');
  pre.id = 'bsm-layout';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def browser() -> str:
    found = os.environ.get("BSM_BROWSER") or next(filter(None, map(shutil.which, BROWSERS)), None)
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("no headless browser: `make browser` installs Debian's chromium")
    pytest.skip("no chromium: `make browser` (or apt-get install chromium) to run this test")


def headless(exe: str, *args: str, cwd: Path) -> str:
    proc = subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-dev-shm-usage",
            f"--user-data-dir={cwd / 'profile'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def layout(exe: str, tmp: Path, html: str, width: int) -> dict:
    probe = tmp / f"probe-{width}.html"
    probe.write_text(html.replace("</body>", MEASURE + "</body>"))
    dom = headless(
        exe,
        f"--window-size={width},900",
        "--virtual-time-budget=5000",
        "--dump-dom",
        probe.as_uri(),
        cwd=tmp,
    )
    m = re.search(r'<pre id="bsm-layout">(.*?)</pre>', dom, re.S)
    assert m, dom[-2000:]
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def test_the_report_in_a_headless_browser(overlay):
    tmp, _, html = overlay
    exe = browser()
    shot = tmp / "report.png"
    headless(
        exe,
        "--window-size=1280,4000",
        f"--screenshot={shot}",
        (tmp / "both.html").as_uri(),
        cwd=tmp,
    )
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000, len(png)
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[1] == 1280 and pixels.std() > 0.05  # drawn, not a blank page

    for width in (1280, 700):
        got = layout(exe, tmp, html, width)
        assert got["scrollWidth"] <= got["width"], got  # no horizontal scroll
        figs = {f["id"]: f for f in got["figures"]}
        assert set(figs) == {"fig-loss", "fig-speed", "fig-memory", "fig-optimizer", "fig-timeline"}
        for fid, f in figs.items():
            assert f["drawn"] > 20 and f["texts"] > 5, (fid, f)
            assert f["off"] == [], (width, fid, f["off"][:5])
            left, _, right, _ = f["box"]
            assert left >= 0 and right <= got["width"], (width, fid, f["box"])


def test_each_inline_svg_parses_and_names_its_axes(overlay):
    _, _, html = overlay
    svgs = re.findall(r"<svg.*?</svg>", html, re.S)
    assert len(svgs) == 5
    texts = []
    for s in svgs:
        root = ET.fromstring(s)
        assert root.tag == f"{SVG_NS}svg" and root.get("viewBox"), root.attrib
        _, _, w, h = map(float, root.get("viewBox").split())
        assert w > 0 and h > 0
        texts.append(" ".join("".join(t.itertext()) for t in root.iter(f"{SVG_NS}text")))
    loss, speed, memory, optimizer, timeline = texts
    assert "optimizer step" in loss and "nats/token" in loss
    assert "tokens/s per GPU" in speed and "log axis: measured is 14" in speed
    assert "GiB per GPU" in memory
    assert "learning rate" in optimizer and "L2 norm (before clipping)" in optimizer
    assert "(min)" in timeline and "resume: after-calibration" in timeline


def test_a_limit_far_above_the_run_is_named_in_the_title_not_the_legend(single):
    """The legend lists only what is in view: a usable limit 20x the run is left above the
    plot, said in the title, and its line stays in the plot data."""
    data, page = single
    memory = re.search(r'id="fig-memory">(.*?)</svg>', page, re.S).group(1)
    words = " ".join(
        "".join(t.itertext()) for t in ET.fromstring(memory + "</svg>").iter(f"{SVG_NS}text")
    )
    assert "usable limit 7.8 GiB, above the plot" in words
    assert words.count("usable limit") == 1  # the title only
    usable, measured = data["memory"]["usable limit"]["y"], data["memory"]["measured peak memory"]
    assert min(usable) > 10 * max(measured["y"])
