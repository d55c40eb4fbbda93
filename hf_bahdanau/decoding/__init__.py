"""Decoding: the `Translator` every way of translating goes through, and the search it runs."""
