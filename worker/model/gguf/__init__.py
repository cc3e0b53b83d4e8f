"""GGUF import: a GGUF checkpoint (llama.cpp, LM Studio, Ollama) becomes an MLX model folder."""
