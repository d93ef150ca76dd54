"""Execute a model file with every non-stdlib import replaced by a permissive stub.

A host without a GPU (or a test) can then load sglang's ``kimi_k25.py`` and
look at its real classes: ``torch``, ``transformers``, ``numpy`` and
``sglang.*`` become stub modules whose attributes are stubs; a stub used as a
base class (``nn.Module``) turns into a real, empty class, so the file's own
classes are real and ``cls.__new__(cls)`` works; a stub used as a decorator
hands the function back unchanged.

Standard library only, and no sglfleet imports: the SGLang stand-in copies
this file to hosts. ``sys.modules`` and ``sys.meta_path`` are put back when
``load_with_stubs`` returns (standard-library modules the file imported stay,
as any import leaves them).

**Example:**

.. code:: python

    module = load_with_stubs(Path("kimi_k25.py"), "kimi_k25")
    cls = module.KimiK25ForConditionalGeneration
    model = cls.__new__(cls)
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path


def load_with_stubs(path: Path, module_name: str) -> types.ModuleType:
    """
    Execute ``path`` as module ``module_name`` with non-stdlib imports stubbed.

    + path: the Python file to execute, e.g. an installed ``kimi_k25.py``
    + module_name: the name the module gets (its ``__name__``)

    **Example:**

    .. code:: python

        module = load_with_stubs(Path(site) / "sglang/srt/models/kimi_k25.py", "kimi_k25")
    """
    path = Path(path)
    finder = _StubFinder()
    # Modules already loaded for real (torch in a test process, say) would win
    # over the finder: hide those the file names, for the duration of the run.
    hidden = _imported_roots(path.read_bytes()) | {module_name.split(".")[0]}
    hidden = {r for r in hidden if r not in sys.stdlib_module_names}
    before = dict(sys.modules)
    for name in before:
        if name.split(".")[0] in hidden:
            del sys.modules[name]
    sys.meta_path.insert(0, finder)
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.meta_path.remove(finder)
        for name, value in list(sys.modules.items()):
            if name not in before and (isinstance(value, _StubModule) or name == module_name):
                del sys.modules[name]
        sys.modules.update(before)


def _imported_roots(source: bytes) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self):
        self.classes: dict[str, type] = {}  # one real class per stub used as a base

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in sys.stdlib_module_names:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return _StubModule(spec.name, self)

    def exec_module(self, module):
        pass


class _StubModule(types.ModuleType):
    def __init__(self, name, finder):
        super().__init__(name)
        self.__path__ = []
        self.__stub_finder__ = finder

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Stub(f"{self.__name__}.{name}", self.__stub_finder__)


def _stub_result(self, *args, **kwargs):
    return _Stub(f"{self._stub_name}(...)", self._stub_finder)


class _Stub:
    """Anything: attribute, call, item, operand, context manager, base class."""

    def __init__(self, name, finder):
        object.__setattr__(self, "_stub_name", name)
        object.__setattr__(self, "_stub_finder", finder)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Stub(f"{self._stub_name}.{name}", self._stub_finder)

    def __call__(self, *args, **kwargs):
        # Used as a decorator (@torch.no_grad(), @torch.compile): keep the function.
        if len(args) == 1 and not kwargs and isinstance(args[0], (types.FunctionType, type)):
            return args[0]
        return _Stub(f"{self._stub_name}()", self._stub_finder)

    def __mro_entries__(self, bases):
        classes = self._stub_finder.classes
        if self._stub_name not in classes:
            module, _, name = self._stub_name.rpartition(".")
            classes[self._stub_name] = type(name, (), {
                "__module__": module,
                "__init__": lambda self, *args, **kwargs: None,
                "__init_subclass__": classmethod(lambda cls, **kwargs: None),
            })
        return (classes[self._stub_name],)

    def __repr__(self):
        return f"<stub {self._stub_name}>"

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

    def __contains__(self, item):
        return False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __int__(self):
        return 0

    __index__ = __int__

    def __float__(self):
        return 0.0

    def __lt__(self, other):
        return False

    __le__ = __gt__ = __ge__ = __lt__

    __getitem__ = _stub_result

    def __setitem__(self, key, value):
        pass

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _stub_result
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = _stub_result
    __mod__ = __rmod__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _stub_result
    __or__ = __ror__ = __and__ = __rand__ = __xor__ = __rxor__ = _stub_result
    __lshift__ = __rshift__ = __neg__ = __pos__ = __invert__ = _stub_result
