"""The Textual user interface. The only package that imports textual."""
