"""
A ``sitecustomize`` for one start of the tiny Kimi K2.5: which ``kimi_k25.py`` sglang
imports, and which EAGLE-3 delegation methods it calls, in what order.

Copied as ``sitecustomize.py`` into a folder of its own, put first on the server's
``PYTHONPATH``, with ``kimi_k25_variant.py`` (the file under test) beside it. Every
python process of the server imports it (the schedulers are spawned), so:

- ``sglang.srt.models.kimi_k25`` is loaded from ``kimi_k25_variant.py``, byte for
  byte, under its own name (sglang's model registry imports it as usual);
- each of ``DELEGATION`` on ``KimiK25ForConditionalGeneration`` is wrapped: a
  call is traced, and so is a look-up that finds no such attribute (it falls to
  ``nn.Module.__getattr__``, which raises the AttributeError sglang sees);
- the same methods of the text model (``DeepseekV2ForCausalLM``) and of the draft
  (``LlamaForCausalLMEagle3``) are traced, to show where a call went on.

Each event is one JSON line in ``trace.jsonl`` beside this file: time, pid, what,
the method, and the caller's ``file:line`` (below ``sglang/``).

**Example:**

.. code:: shell

    PYTHONPATH=/tmp/start-shipped:/tmp/site python3 -m sglang.launch_server ...
    cat /tmp/start-shipped/trace.jsonl
"""

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANT = os.path.join(HERE, "kimi_k25_variant.py")
TRACE = os.path.join(HERE, "trace.jsonl")
DELEGATION = ("set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head")
TRACED = {  # module -> the classes whose delegation methods are traced
    "sglang.srt.models.kimi_k25": ("KimiK25ForConditionalGeneration",),
    "sglang.srt.models.deepseek_v2": ("DeepseekV2ForCausalLM",),
    "sglang.srt.models.llama_eagle3": ("LlamaForCausalLMEagle3",),
}


def trace(event, cls="", method="", depth=2, **extra):
    frame = sys._getframe(depth)
    path = frame.f_code.co_filename
    caller = f"{path.split('sglang/', 1)[-1]}:{frame.f_lineno}"
    line = {"t": round(time.time(), 3), "pid": os.getpid(), "event": event, "class": cls,
            "method": method, "caller": caller, **extra}
    with open(TRACE, "a") as handle:
        handle.write(json.dumps(line) + "\n")


def wrap(cls, name):
    original = cls.__dict__[name]

    def traced(self, *args, **kwargs):
        trace("call", cls.__name__, name)
        return original(self, *args, **kwargs)

    traced.__name__, traced.__doc__, traced.__wrapped__ = name, original.__doc__, original
    setattr(cls, name, traced)


def instrument(module):
    for class_name in TRACED[module.__name__]:
        cls = getattr(module, class_name, None)
        if cls is None:
            trace("class-missing", class_name, depth=1)
            continue
        present = [name for name in DELEGATION if name in cls.__dict__]
        for name in present:
            wrap(cls, name)
        if module.__name__ == "sglang.srt.models.kimi_k25":
            trace("loaded", class_name, depth=1, file=VARIANT, present=present,
                  missing=[name for name in DELEGATION if name not in present],
                  module_functions=[name for name in DELEGATION if name in vars(module)])
            lookup = cls.__getattr__  # nn.Module's: parameters, buffers, submodules, else AttributeError

            def __getattr__(self, name, _lookup=lookup, _cls=cls):
                if name in DELEGATION:
                    trace("missing", _cls.__name__, name)
                return _lookup(self, name)

            cls.__getattr__ = __getattr__


class TracingLoader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        try:
            self.inner.exec_module(module)
        except BaseException as error:
            if module.__name__ == "sglang.srt.models.kimi_k25":
                trace("import-failed", depth=1, error=f"{type(error).__name__}: {error}")
            raise
        instrument(module)


class TracingFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name not in TRACED:
            return None
        if name == "sglang.srt.models.kimi_k25" and os.path.exists(VARIANT):
            spec = importlib.util.spec_from_file_location(name, VARIANT)
        else:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None:
            spec.loader = TracingLoader(spec.loader)
        return spec


sys.meta_path.insert(0, TracingFinder())

# The machine's own sitecustomize, if any, still runs: this one only shadows it on the path.
for folder in sys.path:
    other = os.path.join(folder, "sitecustomize.py")
    if os.path.abspath(folder) != HERE and os.path.isfile(other):
        exec(compile(open(other).read(), other, "exec"), {"__name__": "sitecustomize", "__file__": other})
        break
