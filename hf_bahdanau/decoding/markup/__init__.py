"""Markup: HTML parsed into segments, translated a sentence at a time, its inline tags projected back."""
