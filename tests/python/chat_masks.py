"""chat_masks.py: the assistant mask of a ChatML conversation the way TRL computes it, for the
python and hf checks: the ids between the tokenizations of the text up to the start and up to the
end of each assistant turn (its content and <|im_end|>)."""

START, END = "<|im_start|>assistant\n", "<|im_end|>"


def assistant_mask(tok, rendered, n):
    """1 for each of the n ids of `rendered` inside an assistant turn, by prefix lengths."""
    mask, at = [0] * n, 0
    while (b := rendered.find(START, at)) >= 0:
        b += len(START)
        e = rendered.index(END, b) + len(END)
        lo = len(tok(rendered[:b], add_special_tokens=False)["input_ids"])
        hi = len(tok(rendered[:e], add_special_tokens=False)["input_ids"])
        for k in range(lo, min(hi, n)):
            mask[k] = 1
        at = e
    return mask
