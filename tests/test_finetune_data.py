"""Fine-tuning data: chat and prompt-completion samples, their loss masks, packing into rows."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
from hf_support import save_tiny_tokenizer

from blackwell_sm.errors import SpecError
from blackwell_sm.train.finetune_prepare import (
    FLAG_LOSS,
    FLAG_START,
    Sample,
    chat_sample,
    load_tokenizer,
    pack_rows,
    prompt_completion_sample,
)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    save_tiny_tokenizer(folder)
    return load_tokenizer(folder)


def _words(tok, ids):
    return tok.convert_ids_to_tokens(ids)


def test_chat_counts_the_assistant_turns_only(tok):
    msgs = [
        {"role": "system", "content": "yes"},
        {"role": "user", "content": "hello cat"},
        {"role": "assistant", "content": "hi dog"},
        {"role": "user", "content": "what"},
        {"role": "assistant", "content": "no"},
    ]
    s = chat_sample(tok, msgs, "x:1")
    counted = [w for w, m in zip(_words(tok, s.tokens), s.loss, strict=True) if m]
    # the assistant's words and its end-of-turn token; never the user's or the role markers
    assert counted == ["hi", "dog", "<|end|>", "no", "<|end|>"]


def test_prompt_completion_counts_the_completion_and_its_end(tok):
    s = prompt_completion_sample(tok, "what did the cat", "sat on the mat")
    counted = [w for w, m in zip(_words(tok, s.tokens), s.loss, strict=True) if m]
    assert counted == ["sat", "on", "the", "mat", "<|end|>"]


def test_a_template_that_rewrites_history_is_refused(tmp_path):
    from hf_support import save_tiny_tokenizer as save

    t = save(tmp_path)
    # drops earlier assistant turns from the history: turn 1 is not a prefix of the whole
    t.chat_template = (
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
        "<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|> {% endif %}"
    )
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"},
            {"role": "user", "content": "no"}, {"role": "assistant", "content": "yes"}]  # fmt: skip
    with pytest.raises(SpecError, match="x:3: the chat template does not render turn 1"):
        chat_sample(t, msgs, "x:3")


def test_packing_keeps_samples_whole_and_flags_starts_and_losses():
    samples = [Sample([1, 2, 3], [0, 1, 1]), Sample([4, 5], [0, 1]), Sample([6, 7, 8, 9], [0, 0, 1, 1]),
               Sample([10] * 9, [0] + [1] * 8), Sample([11, 12], [0, 0])]  # fmt: skip
    tokens, flags, st = pack_rows(iter(samples), seq_len=6, pad_id=0)
    assert tokens.reshape(-1, 6).tolist() == [
        [1, 2, 3, 4, 5, 0],  # the third sample does not fit: padding
        [6, 7, 8, 9, 0, 0],
        [10] * 6,  # cut to seq_len
    ]
    S, L = FLAG_START, FLAG_LOSS
    assert flags.reshape(-1, 6).tolist() == [
        [S, L, L, S, L, S],
        [S, 0, L, L, S, 0],
        [S, L, L, L, L, L],
    ]
    assert st == (3, 4, 1, 1, 2 + 1 + 2 + 5)  # rows, samples, truncated, dropped, loss tokens
    tokens, flags, st = pack_rows(iter(samples[:2]), seq_len=6, pad_id=0, packing="pad")
    assert tokens.reshape(-1, 6).tolist() == [[1, 2, 3, 0, 0, 0], [4, 5, 0, 0, 0, 0]]
