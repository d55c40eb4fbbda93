"""Values the command line offers that torch-importing modules act on, in one module that imports nothing.

`hf-bahdanau` parses its arguments before torch and transformers are imported (so `--help` and usage errors answer
at once); the choices and defaults it offers therefore live here, and `card`, `upload`, `quantization` and `export`
import them from here too.
"""

DEFAULT_LICENSE = "apache-2.0"  # of a published model's card (`card`, `publish --license`)
QUANTIZATIONS = ("int8",)  # in-process quantization for CPU inference (`quantization`, `--quantize`)
EXPORT_QUANTIZATIONS = ("float32", "int8", "int8_float32", "float16")  # of a CTranslate2 export (`export`)
ENGINES = ("torch", "ctranslate2", "onnxruntime")  # what runs a translation (`translator`, `--engine`)
EXPORT_INFO = "hf_bahdanau_export.json"  # the marker of an export `export` made (`export`, `models`)

__all__ = ["DEFAULT_LICENSE", "ENGINES", "EXPORT_INFO", "EXPORT_QUANTIZATIONS", "QUANTIZATIONS"]
