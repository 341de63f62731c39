"""A sentence-transformers folder holding a tiny random BERT (mean pooling, normalised): the
hybrid's encoder in the tests and in the hostile-input prober (tools/prober runs this file
as a script: ``python tests/tiny_encoder.py DIR``).  Built offline, seeded, in about a second."""

from __future__ import annotations

import json
import sys
from pathlib import Path

WORDS = ("a charming and moving film great fun wonderful acting good story funny warm truly work "
         "dull boring bad tedious mess flat").split()


def write_tiny_encoder(d: Path) -> Path:
    """Write the encoder into folder ``d`` (created if missing); returns ``d``."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast
    d.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(WORDS))
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(d / "vocab.txt"), do_lower_case=True).save_pretrained(str(d))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    BertModel(cfg).save_pretrained(str(d))
    (d / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (d / "1_Pooling").mkdir(exist_ok=True)
    (d / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 16,
                                                             "pooling_mode_mean_tokens": True}))
    (d / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 16, "do_lower_case": False}))
    return d


if __name__ == "__main__":
    write_tiny_encoder(Path(sys.argv[1]))
