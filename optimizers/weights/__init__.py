"""The weight phase: online rejection-sampling fine-tuning of a LoRA adapter, and the data it trains on."""
