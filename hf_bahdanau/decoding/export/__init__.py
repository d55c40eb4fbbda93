"""Exports: a model folder written for other runtimes (CTranslate2, ONNX, standard transformers, the browser)."""
