"""Attention shapes of real models (their config.json's fields) that the GPU sizing tests size runs from."""

QWEN25_05B = {
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "hidden_size": 896,
}
QWEN3_4B = {"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128}
