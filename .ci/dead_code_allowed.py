# ruff: noqa: F821, B018
"""False alarms of the dead-code check (.ci/run runs vulture): attributes set for a library that reads them (transformers,
llama.cpp's context parameters, http.server), and a record's field kept for its readers."""
_.allow_tf32  # unused attribute (scripts/train/train_eagle_gpu.py:87)
_.pre_tokenizer  # unused attribute (scripts/train/train_tokenizer.py:35)
_.post_processor  # unused attribute (scripts/train/train_tokenizer.py:42)
_.__signature__  # unused attribute (specviz/app/sessions.py:62)
_._attn_implementation  # unused attribute (specviz/drafts/eagle.py:74)
alpha_range  # unused variable (specviz/engines/advice.py:31)
request_rate  # unused variable (specviz/engines/run.py:31)
_.hf_quantizer  # unused attribute (specviz/runtime/gguf.py:63)
_.is_quantized  # unused attribute (specviz/runtime/gguf.py:64)
_.n_gpu_layers  # unused attribute (specviz/runtime/llamacpp.py:67)
_.n_batch  # unused attribute (specviz/runtime/llamacpp.py:94)
_.n_ubatch  # unused attribute (specviz/runtime/llamacpp.py:95)
_.n_seq_max  # unused attribute (specviz/runtime/llamacpp.py:96)
_.n_threads  # unused attribute (specviz/runtime/llamacpp.py:96)
_.n_threads_batch  # unused attribute (specviz/runtime/llamacpp.py:96)
_.type_k  # unused attribute (specviz/runtime/llamacpp.py:97)
_.type_v  # unused attribute (specviz/runtime/llamacpp.py:97)
_.embeddings  # unused attribute (specviz/runtime/llamacpp.py:98)
_.pooling_type  # unused attribute (specviz/runtime/llamacpp.py:99)
_.no_perf  # unused attribute (specviz/runtime/llamacpp.py:100)
_.do_GET  # unused method (specviz/serve.py:262)
_.do_POST  # unused method (specviz/serve.py:267)
_.log_message  # unused method (specviz/serve.py:288)
disagreement_chart  # unused variable (specviz/app/compare_tab.py:44): a handler output's field, set by keyword
correct  # unused variable (specviz/app/lossless_tab.py:47): a handler output's field, set by keyword
wrong_scalar  # unused variable (specviz/app/lossless_tab.py:48): a handler output's field, set by keyword
wrong_raw  # unused variable (specviz/app/lossless_tab.py:49): a handler output's field, set by keyword
__getattr__  # unused function (specviz/__init__.py:37): the module's lazy names, called by Python (PEP 562)
__dir__  # unused function (specviz/__init__.py:48): dir(specviz) with the lazy names, called by Python (PEP 562)
verbose  # unused variable (specviz/runtime/gguf_tokenizer.py:45): a keyword its callers pass, as to transformers' tokenizers
clean_up_tokenization_spaces  # unused variable (specviz/runtime/gguf_tokenizer.py:68): likewise a keyword its callers pass
