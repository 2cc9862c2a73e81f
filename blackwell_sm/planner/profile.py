"""Calibration profiles: versioned YAML that overrides some of the planner's constants per GPU kind,
written by `bsm calibrate` and applied by `bsm plan --calibration FILE`, the spec's
`compute.calibration`, or `$BSM_CALIBRATION` (that order of precedence).

A profile entry is keyed by a GPU's key (the first word of its catalog name: `B200`, `H100`,
`cpu`). It may change the step-time and memory constants (`calibration.FITTABLE`), narrow the
speed range, and describe the hardware itself: a part that runs differently from the catalog's
(`peak_scale` for a power cap, `memory_gib` usable) or a GPU the catalog lacks (`peak_tflops`,
`hbm_tb_s`, `memory_gib`, placed on the catalog instance types listed in `instance_types`).
Every field is bounded and finite; a refused one names the file, the field's path and where the
profile came from (`--calibration`, the spec's `compute.calibration`, `$BSM_CALIBRATION`).

An entry records which constants its fit identified (`fitted`); a plan says which of the constants
its configuration uses were fitted and which are defaults (`CalibrationRef.fitted` / `defaults`),
and its speed is `calibrated` only when the matmul efficiency of its own precision and compile
setting was fitted (`for_mode`): a profile fitted on bf16 runs does not vouch for an fp8 plan.
Pure data and pure functions, but `load_profile` / `resolve_profile`, which read the file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from blackwell_sm.errors import SpecError
from blackwell_sm.hardware import CATALOG, InstanceType
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.precision import is_low

PROFILE_VERSION: Final = 1
ENV_CALIBRATION = "BSM_CALIBRATION"
#: Where a profile came from, as its messages name it.
ORIGINS = {
    "flag": "--calibration",
    "spec": "the spec's compute.calibration",
    "env": f"${ENV_CALIBRATION}",
    "api": "calibration=",
}
#: Highest dense peak a profile may give one GPU, TFLOP/s (a B200 has 4,500 at fp8).
MAX_PEAK_TFLOPS = 100_000.0
#: Matmul efficiency keys in a profile: precision, and "+compile" when under torch.compile.
COMPILE_SUFFIX = "+compile"


def matmul_key(precision: str, compile: bool) -> str:
    """The profile's text key for MATMUL_EFFICIENCY[(precision, compile)]."""
    return precision + (COMPILE_SUFFIX if compile else "")


def parse_matmul_key(key: str) -> tuple[str, bool]:
    """(precision, compile) of a profile key such as `bf16+compile`."""
    return key.removesuffix(COMPILE_SUFFIX), key.endswith(COMPILE_SUFFIX)


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ProfileConstants(_In):
    """Constants this profile changes on one GPU; a missing one keeps calibration.py's value."""

    matmul_efficiency: dict[str, float] | None = Field(
        None,
        description="Achieved fraction of dense peak of the block linears, by 'PRECISION' or "
        "'PRECISION+compile' (e.g. bf16, fp8+compile); each in (0, 2].",
    )
    attention_efficiency: float | None = Field(None, gt=0, le=2)
    comm_overlap: float | None = Field(None, ge=0, le=1)
    nvlink_efficiency: float | None = Field(None, gt=0, le=2)
    efa_efficiency: float | None = Field(None, gt=0, le=2)
    hbm_efficiency: float | None = Field(None, gt=0, le=2)
    fragmentation: float | None = Field(None, ge=0, le=1)

    def changed(self) -> dict[str, Any]:
        """The fields set, as {name: value} (matmul keys as `matmul_efficiency.KEY`)."""
        out: dict[str, Any] = {}
        for name in C.FITTABLE:
            v = getattr(self, name)
            if v is None:
                continue
            if name == "matmul_efficiency":
                out.update({f"{name}.{k}": x for k, x in v.items()})
            else:
                out[name] = v
        return out


class GpuProfile(_In):
    """One GPU kind in a profile (not calibration.GpuCalibration: that is the built-in table)."""

    constants: ProfileConstants = Field(default_factory=ProfileConstants)
    speed_range: (
        tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, le=10)]] | None
    ) = Field(
        None,
        description="(fraction below, fraction above) the speed estimate, from the fit's "
        "residuals; below in [0, 1), above in [0, 10]; default RANGE_BY_EVIDENCE['calibrated'].",
    )
    peak_scale: float = Field(
        1.0, gt=0, le=2, description="Multiplies the catalog's dense peaks (a power-capped part)."
    )
    memory_gib: float | None = Field(None, gt=0, le=4096, description="Usable memory per GPU.")
    peak_tflops: dict[str, Annotated[float, Field(gt=0, le=MAX_PEAK_TFLOPS)]] | None = Field(
        None,
        description="Dense peak TFLOP/s by precision (bf16 required; fp8, mxfp8): a GPU the "
        "catalog lacks, or this machine's measured rate (`cpu`).",
    )
    hbm_tb_s: float | None = Field(None, gt=0, le=1000)
    instance_types: list[str] = Field(
        default_factory=list,
        max_length=len(CATALOG),
        description="Catalog instance types whose GPU this entry replaces (a GPU the catalog "
        "lacks, placed in a known instance frame).",
    )
    rows: int = Field(0, ge=0, description="Measured rows the fit used.")
    fitted: list[str] = Field(default_factory=list, description="Constants the data identified.")
    kept: list[str] = Field(
        default_factory=list, description="Constants the data could not identify (defaults)."
    )
    median_abs_error_before: float | None = Field(None, ge=0, description="Speed, before the fit.")
    median_abs_error_after: float | None = Field(
        None, ge=0, description="Speed, after; None when exact by construction."
    )
    memory_median_abs_error_before: float | None = Field(None, ge=0)
    memory_median_abs_error_after: float | None = Field(
        None, ge=0, description="None when exact by construction."
    )
    exact_by_construction: list[Literal["speed", "memory"]] = Field(
        default_factory=list,
        description="Figures with no more measurements than fitted constants moving them: any "
        "fit matches them, so their error after proves nothing (not validated).",
    )

    def fitted_names(self) -> list[str]:
        """What the fit identified, or for a hand-written entry the constants it sets."""
        return list(self.fitted) or list(self.constants.changed())


class ProfileSource(_In):
    kind: Literal["run", "csv", "job", "manual"]
    ref: str = Field(max_length=2048)
    rows: int = Field(0, ge=0)


class CalibrationProfile(_In):
    """A calibration profile (schema `version` 1)."""

    version: Literal[1] = PROFILE_VERSION
    kind: Literal["bsm-calibration-profile"] = "bsm-calibration-profile"
    name: str = Field("calibration", max_length=256)
    created: str = Field(
        max_length=64, description="UTC date and time the profile was written (ISO 8601)."
    )
    sources: list[ProfileSource] = Field(default_factory=list, max_length=10_000)
    gpus: dict[Annotated[str, Field(min_length=1, max_length=64)], GpuProfile] = Field(
        default_factory=dict, max_length=64
    )

    def entry(self, gpu_name: str) -> GpuProfile | None:
        return self.gpus.get(C.gpu_key(gpu_name))

    def to_yaml(self) -> str:
        import yaml

        head = (
            "# blackwell_sm calibration profile (docs/calibration.md). Apply with\n"
            "#   bsm plan --calibration FILE, compute.calibration: FILE, or BSM_CALIBRATION=FILE\n"
        )
        data = self.model_dump(mode="json", exclude_none=True)
        data["gpus"] = {
            key: entry.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
            for key, entry in self.gpus.items()
        }
        return head + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def _check_entry(entry: GpuProfile, where: str, source: str) -> None:
    """What the schema cannot say of one entry: known keys, bf16 among the peaks, a placed GPU
    complete and on a catalog GPU instance type."""

    def bad(msg: str, field: str) -> SpecError:
        return SpecError(f"invalid {source}:\n  {where}.{field}: {msg}", field=f"{where}.{field}")

    for key, v in (entry.constants.matmul_efficiency or {}).items():
        if parse_matmul_key(key) not in C.MATMUL_EFFICIENCY:
            allowed = ", ".join(matmul_key(p, c) for p, c in C.MATMUL_EFFICIENCY)
            raise bad(
                f"unknown matmul efficiency key {key!r}; allowed: {allowed}",
                f"constants.matmul_efficiency.{key}",
            )
        if not 0 < v <= 2:
            raise bad(
                f"matmul efficiency {v} is outside (0, 2]", f"constants.matmul_efficiency.{key}"
            )
    precisions = sorted({p for p, _ in C.MATMUL_EFFICIENCY})
    if entry.peak_tflops is not None:
        for key in entry.peak_tflops:
            if key not in precisions:
                raise bad(
                    f"unknown precision {key!r}; allowed: {', '.join(precisions)}",
                    f"peak_tflops.{key}",
                )
        if "bf16" not in entry.peak_tflops:
            raise bad("needs a bf16 peak (the MFU basis)", "peak_tflops")
    gpu_types = [n for n, i in CATALOG.items() if i.gpu.kind == "cuda"]
    for i, name in enumerate(entry.instance_types):
        if name not in gpu_types:
            raise bad(
                f"{name!r} is not a GPU instance type of the catalog; allowed: "
                f"{', '.join(gpu_types)}",
                f"instance_types.{i}",
            )
    if entry.instance_types and not (entry.peak_tflops and entry.hbm_tb_s and entry.memory_gib):
        raise bad(
            "a GPU placed on instance_types needs peak_tflops, hbm_tb_s and memory_gib",
            "instance_types",
        )


def parse_profile(data: Any, *, source: str = "calibration profile") -> CalibrationProfile:
    """Validate a mapping into a CalibrationProfile, or raise SpecError naming the field."""
    from blackwell_sm.spec.run import spec_error

    if not isinstance(data, dict):
        raise SpecError(f"invalid {source}: expected a mapping", field="(top level)")
    try:
        prof = CalibrationProfile.model_validate(data)
    except ValidationError as e:
        raise spec_error(e, root=CalibrationProfile, source=source) from None
    for key, entry in prof.gpus.items():
        _check_entry(entry, f"gpus.{key}", source)
    return prof


def load_profile(
    path: str | Path, *, field: str = "--calibration", origin: str = "flag"
) -> CalibrationProfile:
    """Read a profile file (YAML or JSON) through the safe loader; errors name the file, the
    field and where the path came from (`origin`: a key of ORIGINS)."""
    from blackwell_sm.safe_load import load_mapping

    given = ORIGINS.get(origin, origin)
    data = load_mapping(path, field=field, label=f"calibration profile (given by {given})")
    return parse_profile(data, source=f"calibration profile {path} (given by {given})")


class AppliedProfile(_In):
    """A profile with where it came from (flag, spec or environment) and its path."""

    profile: CalibrationProfile
    path: str
    origin: Literal["flag", "spec", "env", "api"]


def resolve_profile(
    flag: str | Path | None, spec_path: str | None, environ: Mapping[str, str] | None = None
) -> AppliedProfile | None:
    """The profile to apply: `--calibration` > the spec's `compute.calibration` >
    `$BSM_CALIBRATION`; None when none is given (an empty variable counts as none)."""
    env = os.environ if environ is None else environ
    for value, origin, field in (
        (flag, "flag", "--calibration"),
        (spec_path, "spec", "compute.calibration"),
        (env.get(ENV_CALIBRATION) or None, "env", ENV_CALIBRATION),
    ):
        if value:
            prof = load_profile(value, field=field, origin=origin)
            return AppliedProfile(profile=prof, path=str(value), origin=origin)
    return None


def profile_for(spec: Any, flag: str | Path | None = None) -> AppliedProfile | None:
    """The profile a plan of `spec` applies (`resolve_profile` with the spec's own path): what
    every edge that plans a spec calls, so the planner itself reads no file or variable."""
    return resolve_profile(flag, spec.compute.calibration)


def apply_constants(base: C.Constants, entry: GpuProfile | None) -> C.Constants:
    """`base` with what `entry` changes (evidence 'calibrated' when it changes any constant)."""
    if entry is None:
        return base
    k = entry.constants
    upd: dict[str, Any] = {}
    if k.matmul_efficiency:
        mm = dict(base.matmul_efficiency)
        mm.update({parse_matmul_key(key): v for key, v in k.matmul_efficiency.items()})
        upd["matmul_efficiency"] = mm
    for name in C.FITTABLE[1:]:
        v = getattr(k, name)
        if v is not None:
            upd[name] = v
    if upd or entry.speed_range:
        upd["evidence"] = "calibrated"
        upd["speed_range"] = entry.speed_range
    return base._replace(**upd)


def apply_instance(instance: InstanceType, entry: GpuProfile | None) -> InstanceType:
    """`instance` with the GPU as the profile describes it (peaks, memory, bandwidth)."""
    if entry is None:
        return instance
    gpu = instance.gpu
    upd: dict[str, Any] = {}
    if entry.peak_tflops:
        upd["peak_tflops"] = dict(entry.peak_tflops)
    if entry.peak_scale != 1.0:
        peaks = upd.get("peak_tflops", gpu.peak_tflops)
        upd["peak_tflops"] = {p: v * entry.peak_scale for p, v in peaks.items()}
    if entry.memory_gib is not None:
        upd["memory_gib"] = entry.memory_gib
    if entry.hbm_tb_s is not None:
        upd["hbm_tb_s"] = entry.hbm_tb_s
    if not upd:
        return instance
    return instance.model_copy(update={"gpu": gpu.model_copy(update=upd)})


def placed_gpu(profile: CalibrationProfile, instance: InstanceType) -> InstanceType:
    """`instance` with the profile's GPU placed on it, when an entry lists its type; else as is."""
    for key, entry in profile.gpus.items():
        if instance.name in entry.instance_types:
            gpu = instance.gpu.model_copy(update={"name": key, "compute_capability": None})
            return instance.model_copy(update={"gpu": gpu})
    return instance


def for_instance(
    profile: CalibrationProfile | None, instance: InstanceType
) -> tuple[InstanceType, C.Constants, dict[str, tuple[Any, Any]]]:
    """(the instance as the profile describes it, its constants, {constant: (default, new)})."""
    if profile is None:
        return instance, C.constants_for(instance.gpu.name), {}
    inst = placed_gpu(profile, instance)
    entry = profile.entry(inst.gpu.name)
    inst = apply_instance(inst, entry)
    base = C.constants_for(inst.gpu.name)
    k = apply_constants(base, entry)
    return inst, k, changed_constants(base, k, instance, inst)


def changed_constants(
    base: C.Constants, new: C.Constants, before: InstanceType, after: InstanceType
) -> dict[str, tuple[Any, Any]]:
    """{name: (default, profile's)} for every constant and GPU figure the profile changed."""
    out: dict[str, tuple[Any, Any]] = {}
    for key, v in new.matmul_efficiency.items():
        old = base.matmul_efficiency.get(key)
        if old != v:
            out[f"matmul_efficiency.{matmul_key(*key)}"] = (old, v)
    for name in C.FITTABLE[1:]:
        if getattr(base, name) != getattr(new, name):
            out[name] = (getattr(base, name), getattr(new, name))
    if base.range != new.range:
        out["speed_range"] = (list(base.range), list(new.range))
    g0, g1 = before.gpu, after.gpu
    for name in ("name", "memory_gib", "hbm_tb_s", "peak_tflops"):
        if getattr(g0, name) != getattr(g1, name):
            out[f"gpu.{name}"] = (getattr(g0, name), getattr(g1, name))
    return out


def mode_constants(precision: str, compile: bool) -> list[str]:
    """The constants a configuration's prediction uses: the matmul efficiency of its precision
    and compile setting (and bf16's, for the output head of a low-precision run), the others."""
    keys = [f"matmul_efficiency.{matmul_key(precision, compile)}"]
    if is_low(precision):
        keys.append(f"matmul_efficiency.{matmul_key('bf16', compile)}")
    return keys + list(C.FITTABLE[1:])


def for_mode(
    constants: C.Constants, ref: Any, gpu_name: str, precision: str, compile: bool
) -> tuple[C.Constants, Any, str | None]:
    """(constants, the plan's CalibrationRef, a warning or None) for the configuration a plan
    runs: the ref lists the constants it uses at their defaults (`defaults`), and when the
    profile did not fit this mode's own matmul efficiency the speed is not `calibrated` (the
    evidence and range are the GPU's without the profile) and the warning says so."""
    if ref is None or not ref.gpu:
        return constants, ref, None
    used = mode_constants(precision, compile)
    ref = ref.model_copy(update={"defaults": [n for n in used if n not in ref.fitted]})
    if used[0] in ref.fitted or constants.evidence != "calibrated":
        return constants, ref, None
    base = C.constants_for(gpu_name)
    mode = matmul_key(precision, compile)
    note = (
        f"calibration profile {ref.profile} fitted {', '.join(ref.fitted) or 'no constant'} on "
        f"{ref.gpu}, not the {mode} matmul efficiency this plan runs at: its speed and range are "
        f"the uncalibrated ones ({base.evidence}); pin training.precision and compile to a "
        "fitted mode, or calibrate on runs of this one"
    )
    return constants._replace(evidence=base.evidence, speed_range=None), ref, note
