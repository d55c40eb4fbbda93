"""Engines beside torch: CTranslate2 and ONNX Runtime, each translating an export of a model folder."""
