"""Registry clients: Ollama and Hugging Face pulls (pull, download, ollama, hf), pushes (push), and the names they take
(reference). A package marker (no code): covered by its modules' tests (tests/unit/service/,
tests/integration/service/)."""
