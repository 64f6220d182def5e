"""Sub-commands; each module exposes `register(app)`. The CLI lists them in one tuple."""
