//! Model providers: one trait, the Anthropic and OpenAI-compatible clients, the script provider.
