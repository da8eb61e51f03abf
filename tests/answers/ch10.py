"""Answers for the chapter 10 checkers: one correct, several wrong (used by
tests/test_exercises.py)."""


def _read_top_k(body, vocab_size, mode="ok"):
    from llmcore.api import APIError
    value = body.get("top_k")
    if value is None and not (mode == "null_refused" and "top_k" in body):
        return 0
    ok_type = (isinstance(value, int) if mode == "bool_passes"
               else isinstance(value, (int, float)) if mode == "float_passes"
               else type(value) is int)
    upper = 10**30 if mode == "no_upper_bound" else vocab_size
    lower = 0 if mode == "minus_one_refused" else -1
    if not ok_type or not lower <= value <= upper:
        raise APIError(400, "bad top_k", param="top_k")
    if mode == "minus_one_kept":
        return value
    return max(int(value), 0)


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch10.check_read_top_k": (
        _read_top_k,
        [lambda body, v, mode=mode: _read_top_k(body, v, mode)
         for mode in ("null_refused", "bool_passes", "float_passes", "no_upper_bound",
                      "minus_one_refused", "minus_one_kept")]
        + [lambda body, v: max(int(body.get("top_k") or 0), 0)]),  # no checks at all
}


def _read_stream(reads, mode="ok"):
    import json
    buffer, texts = (b"" if mode != "decode_each_read" else ""), []
    for read in reads:
        if mode == "decode_each_read":  # a read may end inside a UTF-8 character
            read = read.decode("utf-8")
        if mode == "no_buffer":  # an event split across reads is lost or broken
            buffer = read
        else:
            buffer += read
        sep = "\n\n" if mode == "decode_each_read" else b"\n\n"
        while sep in buffer:
            event, buffer = buffer.split(sep, 1)
            if isinstance(event, bytes):
                event = event.decode("utf-8")
            for line in event.split("\n"):
                if mode != "no_comments" and not line.startswith("data: "):
                    continue
                data = line[len("data: "):]
                if data == "[DONE]":
                    return texts
                chunk = json.loads(data)
                if "error" in chunk:
                    if mode == "error_ignored":
                        continue
                    raise RuntimeError(chunk["error"]["message"])
                if mode == "first_choice":  # the usage chunk has no choices
                    texts.append(chunk["choices"][0]["text"])
                    continue
                texts += [c["text"] for c in chunk["choices"]
                          if c["text"] or mode == "empty_kept"]
    if mode == "cut_off_accepted":
        return texts
    raise RuntimeError("cut off")


def _render_chatml(messages, add_generation_prompt=False, mode="ok"):
    out = ""
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = ("" if mode == "parts_glued" else "\n").join(
                p["text"] for p in content)
        elif content is None:
            content = "None" if mode == "none_text" else ""
        head = "<|im_start|>" + m["role"] + ("" if mode == "no_role_newline" else "\n")
        end = {"no_end_newline": "<|im_end|>",
               "blank_line": "<|im_end|>\n\n"}.get(mode, "<|im_end|>\n")
        out += head + content + end
    if add_generation_prompt or mode == "always_prompt":
        out += "<|im_start|>assistant" + ("" if mode == "prompt_no_newline" else "\n")
    return out


ANSWERS.update({
    "ch10.check_read_stream": (
        _read_stream,
        [lambda reads, mode=mode: _read_stream(reads, mode)
         for mode in ("decode_each_read", "no_buffer", "no_comments", "error_ignored",
                      "first_choice", "empty_kept", "cut_off_accepted")]),
    "ch10.check_render_chatml": (
        _render_chatml,
        [lambda messages, gen, mode=mode: _render_chatml(messages, gen, mode)
         for mode in ("parts_glued", "none_text", "no_role_newline", "no_end_newline",
                      "blank_line", "always_prompt", "prompt_no_newline")]),
    # 40 clients at n = 2 against max_batch 8 + max_waiting 24: 16 admitted
    "ch10.check_q_refused": (24, [8, 32, 36, 16, 0]),
    # the third wave of 8 waits two waves of 100 steps of 20 ms
    "ch10.check_q_queue_wait": (4.0, [2.0, 6.0, 0.04, 0.02, 40.0]),
})
