"""A Hugging Face Llama forward (a small random-weight config: nothing downloaded) wrapped in a
cgviz.Tree on the GPU: where it needs the host, the eager step names the line that does it, the
innermost frame outside torch and cgviz, as torch's own skip messages do."""

from __future__ import annotations

import pytest
import torch

import cgviz
from cgviz.trace.diagnose import user_source
from helpers import keep_trace

transformers = pytest.importorskip("transformers")


def test_a_llama_forward_that_reads_a_value_on_the_host_names_that_line():
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).cuda().eval()
    tree = cgviz.Tree("cuda")
    forward = tree.wrap(lambda ids, mask: model(input_ids=ids, attention_mask=mask).logits, name="llama")
    ids = torch.randint(0, 128, (2, 16), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # a padded row: the mask code looks at the values
    with torch.no_grad():
        for _ in range(3):
            forward(ids, mask)
    eager = [s for s in tree.trace.steps if s.kind == "eager"]
    keep_trace(tree.trace, "llama_host_sync")
    if not eager:
        pytest.skip("this transformers release reads no value on the host in the forward")
    source = user_source(eager[0].reason)
    assert source is not None, eager[0].reason
    assert "transformers/" in source["file"] and source["line"] > 0 and source["code"]
    finding = cgviz.diagnose(tree.trace).of("eager")[0]
    assert finding.numbers["source"] == source
