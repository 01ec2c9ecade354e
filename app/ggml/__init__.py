"""The ctypes layer over ggml/llama.cpp: library binding, log routing, allocation reports. Imports nothing of app."""
