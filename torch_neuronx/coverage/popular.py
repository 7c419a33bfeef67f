"""A curated list of the most used text-generation architectures (Transformers ``model_type``).

Curated by hand, not measured: the Hugging Face Hub's download ranking cannot
be queried offline. The list covers the architectures behind the families
that dominate the Hub's text-generation downloads and leaderboards over
2023–2026 (Llama/SmolLM, Qwen 2/2.5/3 dense and MoE, Mistral/Mixtral,
Gemma 1–3, Phi-2/3/4, GPT-2/DistilGPT2, Pythia/GPT-NeoX, OPT, BLOOM, Falcon,
GPT-J, StarCoder/SantaCoder, CodeGen, StableLM, OLMo, Granite, Command-R,
DeepSeek-V3/R1, GPT-OSS, SmolLM3). One ``model_type`` can serve many of the
top models (e.g. ``llama`` for Llama 2/3, SmolLM2, TinyLlama, Vicuna).
"""
POPULAR_TEXT_GENERATION = (
    "llama", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "mistral", "mixtral", "gemma", "gemma2",
    "gemma3_text", "phi", "phi3", "gpt2", "gpt_neox", "opt", "bloom", "falcon", "gptj", "gpt_bigcode",
    "starcoder2", "codegen", "stablelm", "olmo2", "granite", "cohere", "deepseek_v3", "gpt_oss", "smollm3",
)
