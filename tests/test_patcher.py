"""The class-body patch engine, on real upstream kimi_k25.py files and on edge cases."""

import ast
import re
import sys

import pytest

from sglfleet.artifacts.patcher import DEFAULT_PATCH, PatchRefused, apply, load_patch, missing_methods, revert, unified_diff
from sglfleet.shipped.stub_import import load_with_stubs
from sglfleet.artifacts.upstream import sglang_file

TARGET = "KimiK25ForConditionalGeneration"
METHODS = ["set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"]
KIMI = "sglang/srt/models/kimi_k25.py"
# 0.5.9 lacks the methods; upstream has them from 0.5.10 on; 0.5.23 is the newest.
LATER = ["0.5.10", "0.5.14", "0.5.15", "0.5.23"]


@pytest.fixture(scope="module")
def patch():
    return load_patch()


def class_methods(source: bytes, name: str = TARGET) -> list[str]:
    """The method names defined directly in the body of the top-level class ``name``."""
    [node] = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == name]
    return [n.name for n in node.body if isinstance(n, ast.FunctionDef)]


def patched(source: bytes, patch) -> bytes:
    """Apply, and check what holds for every patched file: a byte-exact round trip."""
    result = apply(source, patch)
    compile(result, "patched", "exec", dont_inherit=True)
    assert apply(result, patch) == result
    assert revert(result, patch) == source  # one contiguous insertion, all else byte-identical
    return result


# --- real upstream files -------------------------------------------------------


def test_patch_file_names_the_class_and_the_three_methods(patch):
    assert patch.target == TARGET
    assert patch.method_names == METHODS


def test_upstream_0_5_9_gets_the_methods_inside_the_class(patch):
    original = sglang_file("0.5.9", KIMI).read_bytes()
    assert missing_methods(original, patch) == METHODS

    result = patched(original, patch)

    assert class_methods(result)[-3:] == METHODS
    assert missing_methods(result, patch) == []
    # Inside the class, not after `EntryClass` at the end of the file.
    assert result.rstrip().endswith(b"EntryClass = [KimiK25ForConditionalGeneration]")
    assert result.index(b"def get_embed_and_head") < result.index(b"EntryClass")


@pytest.mark.parametrize("version", LATER)
def test_upstream_releases_with_the_methods_are_left_alone(patch, version):
    original = sglang_file(version, KIMI).read_bytes()
    assert missing_methods(original, patch) == []
    assert apply(original, patch) == original
    assert revert(original, patch) == original


def test_diff_of_upstream_0_5_9_shows_only_added_lines(patch):
    original = sglang_file("0.5.9", KIMI).read_bytes()
    diff = unified_diff(original, apply(original, patch), "sglang/srt/models/kimi_k25.py")
    assert diff.startswith("--- a/sglang/srt/models/kimi_k25.py\n+++ b/sglang/srt/models/kimi_k25.py\n")
    changed = [line for line in diff.splitlines()[2:] if line[:1] in "+-"]
    assert changed and all(line.startswith("+") for line in changed)
    assert "+    def set_eagle3_layers_to_capture(self, layer_ids=None):" in changed
    assert unified_diff(original, original, "x.py") == ""


# --- behaviour: what the EAGLE-3 worker calls ------------------------------------


class RecordingLanguageModel:
    def __init__(self):
        self.calls = []

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.calls.append(("set_eagle3_layers_to_capture", layer_ids))

    def get_embed_and_head(self):
        self.calls.append(("get_embed_and_head",))
        return "embed", "head"

    def set_embed_and_head(self, embed, head):
        self.calls.append(("set_embed_and_head", embed, head))


def load_kimi_class(source: bytes, tmp_path):
    path = tmp_path / "kimi_k25.py"
    path.write_bytes(source)
    return getattr(load_with_stubs(path, "sglang.srt.models.kimi_k25"), TARGET)


def test_patched_methods_delegate_to_the_language_model(patch, tmp_path):
    cls = load_kimi_class(apply(sglang_file("0.5.9", KIMI).read_bytes(), patch), tmp_path)
    model = cls.__new__(cls)  # no __init__: no weights, no GPU
    model.language_model = RecordingLanguageModel()

    model.set_eagle3_layers_to_capture([2, 30, 58])
    model.set_eagle3_layers_to_capture()
    assert model.get_embed_and_head() == ("embed", "head")
    model.set_embed_and_head("E", "H")

    assert model.language_model.calls == [
        ("set_eagle3_layers_to_capture", [2, 30, 58]),
        ("set_eagle3_layers_to_capture", None),
        ("get_embed_and_head",),
        ("set_embed_and_head", "E", "H"),
    ]


def test_patched_methods_raise_attribute_error_when_the_language_model_lacks_them(patch, tmp_path):
    cls = load_kimi_class(apply(sglang_file("0.5.9", KIMI).read_bytes(), patch), tmp_path)
    model = cls.__new__(cls)
    model.language_model = object()

    with pytest.raises(AttributeError, match="does not support EAGLE3 speculative decoding"):
        model.set_eagle3_layers_to_capture([1])
    with pytest.raises(AttributeError, match=re.escape("does not support get_embed_and_head()")):
        model.get_embed_and_head()
    with pytest.raises(AttributeError, match=re.escape("does not support set_embed_and_head()")):
        model.set_embed_and_head("E", "H")


def test_unpatched_0_5_9_class_lacks_what_eagle3_calls(tmp_path):
    # The failure the patch exists for: the worker's first call at start-up.
    cls = load_kimi_class(sglang_file("0.5.9", KIMI).read_bytes(), tmp_path)
    model = cls.__new__(cls)
    model.language_model = RecordingLanguageModel()
    with pytest.raises(AttributeError, match="set_eagle3_layers_to_capture"):
        model.set_eagle3_layers_to_capture([1])


# --- edge cases ----------------------------------------------------------------

SIMPLE = b"""\
import torch


class KimiK25ForConditionalGeneration(torch.nn.Module):
    def forward(self, x):
        return self.language_model(x)


EntryClass = [KimiK25ForConditionalGeneration]
"""


def test_crlf_line_endings_are_kept(patch):
    original = SIMPLE.replace(b"\n", b"\r\n")
    result = patched(original, patch)
    assert class_methods(result) == ["forward"] + METHODS
    assert result.count(b"\n") == result.count(b"\r\n") > original.count(b"\r\n")


def test_tab_indentation_is_followed(patch):
    original = b"class KimiK25ForConditionalGeneration:\n\tdef forward(self, x):\n\t\treturn x\n"
    result = patched(original, patch)
    assert class_methods(result) == ["forward"] + METHODS
    inserted = result[len(original) - 1:]
    indents = re.findall(rb"\n([ \t]*)\S", inserted)
    assert indents and all(indent and set(indent) == {ord("\t")} for indent in indents)


def test_two_space_indentation_is_followed(patch):
    original = b"class KimiK25ForConditionalGeneration:\n  def forward(self, x):\n    return x\n"
    result = patched(original, patch)
    assert b"\n  def get_embed_and_head(self):\n    " in result


def test_decorated_last_method_stays_whole(patch):
    original = b"""\
import functools


class KimiK25ForConditionalGeneration:
    @property
    @functools.lru_cache(
        maxsize=None,
    )
    def start_layer(self):
        return 0
"""
    result = patched(original, patch)
    assert class_methods(result) == ["start_layer"] + METHODS
    namespace = {}
    exec(result, namespace)
    assert isinstance(vars(namespace[TARGET])["start_layer"], property)


def test_nested_class_last_in_body(patch):
    original = b"""\
class KimiK25ForConditionalGeneration:
    def forward(self, x):
        return x

    class Config:
        def get_embed_and_head(self):  # a nested class's method is not the target's
            return None
"""
    result = patched(original, patch)
    assert class_methods(result) == ["forward"] + METHODS
    tree = ast.parse(result)
    nested = tree.body[0].body[1]
    assert nested.name == "Config" and [n.name for n in nested.body] == ["get_embed_and_head"]


def test_comments_and_a_second_class_after_the_target(patch):
    original = b"""\
class KimiK25ForConditionalGeneration:
    def forward(self, x):
        return x  # trailing comment
    # a comment at the body's indentation, after the last statement

# a comment at the top level


class Other:
    def get_embed_and_head(self):
        return None
"""
    result = patched(original, patch)
    assert class_methods(result) == ["forward"] + METHODS
    assert class_methods(result, "Other") == ["get_embed_and_head"]
    assert result.index(b"def set_embed_and_head") < result.index(b"class Other")


def test_no_final_newline(patch):
    original = SIMPLE.rstrip(b"\n").replace(b"\n\n\nEntryClass = [KimiK25ForConditionalGeneration]", b"")
    assert original.endswith(b"return self.language_model(x)")
    result = patched(original, patch)
    assert class_methods(result) == ["forward"] + METHODS
    assert result.endswith(b"# <<< sglfleet patch kimi_k25_eagle3")


def test_prefix_named_class_before_the_target_is_not_touched(patch):
    original = b"""\
class KimiK25ForConditionalGenerationBase:
    def forward(self, x):
        return x


""" + SIMPLE
    result = patched(original, patch)
    assert class_methods(result, "KimiK25ForConditionalGenerationBase") == ["forward"]
    assert class_methods(result) == ["forward"] + METHODS


def test_only_a_prefix_named_class_is_a_missing_class(patch):
    original = b"class KimiK25ForConditionalGenerationBase:\n    pass\n"
    with pytest.raises(PatchRefused, match="no class KimiK25ForConditionalGeneration in the file"):
        apply(original, patch)


def test_syntax_error_is_refused(patch):
    original = SIMPLE.replace(b"return self.language_model(x)", b"return self.language_model(x")
    with pytest.raises(PatchRefused, match=r"^the file does not parse: line \d+: "):
        apply(original, patch)


def test_missing_class_is_refused(patch):
    with pytest.raises(PatchRefused, match="no class KimiK25ForConditionalGeneration"):
        apply(b"import torch\n\nEntryClass = []\n", patch)


def test_two_classes_of_the_name_are_refused(patch):
    original = SIMPLE + b"\n\nif True:\n    class KimiK25ForConditionalGeneration:\n        pass\n"
    with pytest.raises(PatchRefused, match=r"2 classes named KimiK25ForConditionalGeneration \(lines 4, 13\)"):
        apply(original, patch)


def test_class_not_at_top_level_is_refused(patch):
    original = b"try:\n    class KimiK25ForConditionalGeneration:\n        pass\nexcept ImportError:\n    pass\n"
    with pytest.raises(PatchRefused, match="not at the top level"):
        apply(original, patch)


def test_top_level_rebinding_of_the_class_name_is_refused(patch):
    with pytest.raises(PatchRefused, match="line 10 rebinds KimiK25ForConditionalGeneration"):
        apply(SIMPLE + b"KimiK25ForConditionalGeneration = None\n", patch)


def test_refusal_messages_are_one_line(patch):
    for original in (b"class X(:\n", b"", SIMPLE + b"KimiK25ForConditionalGeneration.get_embed_and_head = None\n"):
        with pytest.raises(PatchRefused) as refusal:
            apply(original, patch)
        assert "\n" not in str(refusal.value) and str(refusal.value)


# --- the marked block ------------------------------------------------------------


def test_only_missing_methods_are_added(patch):
    original = SIMPLE.replace(
        b"    def forward", b"    def get_embed_and_head(self):\n        return 1, 2\n\n    def forward"
    )
    result = patched(original, patch)
    assert class_methods(result) == ["get_embed_and_head", "forward",
                                     "set_eagle3_layers_to_capture", "set_embed_and_head"]
    assert result.count(b"def get_embed_and_head") == 1


def test_changed_patch_text_replaces_the_block(patch, tmp_path):
    first = patched(SIMPLE, patch)
    text = DEFAULT_PATCH.read_text()
    newer = tmp_path / "kimi_k25_eagle3.py"
    newer.write_text(text.replace("Get embedding and LM head", "Return embedding and LM head"))
    second_patch = load_patch(newer)
    assert second_patch.digest != patch.digest

    second = apply(first, second_patch)
    assert second != first and second.count(b"# >>> sglfleet patch") == 1
    assert b"Return embedding and LM head" in second and b"Get embedding" not in second
    assert revert(second, second_patch) == SIMPLE
    assert class_methods(second) == ["forward"] + METHODS


def test_block_no_longer_needed_is_removed(patch):
    # The file gained the methods itself (say, an upgrade over a patched file):
    # the block goes, the class keeps upstream's own.
    own = b"".join(
        b"    def %s(self, *args):\n        return None\n\n" % name.encode() for name in METHODS
    )
    result = patched(SIMPLE, patch)
    upgraded = result.replace(b"    def forward", own + b"    def forward")
    assert apply(upgraded, patch) == SIMPLE.replace(b"    def forward", own + b"    def forward")


def test_damaged_block_is_refused(patch):
    result = patched(SIMPLE, patch)
    damaged = result.replace(b"    # <<< sglfleet patch kimi_k25_eagle3", b"")
    for function in (apply, revert):
        with pytest.raises(PatchRefused, match="block of patch kimi_k25_eagle3 is damaged"):
            function(damaged, patch)


def test_encoding_cookie_and_non_ascii_bytes_are_kept(patch):
    original = b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + SIMPLE
    result = patched(original, patch)
    assert result.startswith(b"# -*- coding: latin-1 -*-\n# caf\xe9\n")


def test_utf8_bom_is_kept(patch):
    original = b"\xef\xbb\xbf" + SIMPLE
    result = patched(original, patch)
    assert result.startswith(b"\xef\xbb\xbfimport torch")


# --- shadow and conflict rule ----------------------------------------------------


def test_class_attribute_of_a_method_name_is_refused(patch):
    original = SIMPLE.replace(b"    def forward", b"    get_embed_and_head = None\n\n    def forward")
    with pytest.raises(PatchRefused, match="binds get_embed_and_head at line 5 other than by a method"):
        apply(original, patch)


def test_conditional_method_definition_is_refused(patch):
    original = SIMPLE.replace(
        b"    def forward",
        b"    if torch.cuda:\n        def set_embed_and_head(self, e, h):\n            pass\n\n    def forward",
    )
    with pytest.raises(PatchRefused, match="binds set_embed_and_head at line 6"):
        apply(original, patch)


@pytest.mark.parametrize("line", [
    b"KimiK25ForConditionalGeneration.get_embed_and_head = lambda self: None",
    b"setattr(KimiK25ForConditionalGeneration, 'set_embed_and_head', print)",
])
def test_assignment_onto_the_class_outside_it_is_refused(patch, line):
    with pytest.raises(PatchRefused, match="outside the class; it would replace the patched method"):
        apply(SIMPLE + line + b"\n", patch)


def test_method_inherited_from_a_base_in_the_file_is_refused(patch):
    original = b"""\
class Base:
    def get_embed_and_head(self):
        return 1, 2


class KimiK25ForConditionalGeneration(Base):
    def forward(self, x):
        return x
"""
    with pytest.raises(PatchRefused, match="inherits get_embed_and_head from Base .line 1.; the patch would shadow"):
        apply(original, patch)


def test_module_level_function_of_a_method_name_is_left_alone(patch):
    # What appending at the end of the file leaves: dead module-level functions.
    # They are not attributes of the class; the class still needs the methods.
    original = SIMPLE + b"\n\ndef set_eagle3_layers_to_capture(self, layer_ids=None):\n    pass\n"
    result = patched(original, patch)
    assert class_methods(result) == ["forward"] + METHODS
    assert result.endswith(b"\ndef set_eagle3_layers_to_capture(self, layer_ids=None):\n    pass\n")


def test_one_line_class_body_is_refused(patch):
    with pytest.raises(PatchRefused, match="body on its header line"):
        apply(b"class KimiK25ForConditionalGeneration: pass\n", patch)


# --- the stub loader the stand-in uses ----------------------------------------------


@pytest.mark.parametrize("version", ["0.5.9"] + LATER)
def test_stub_loader_runs_real_upstream_files_and_leaves_sys_modules_as_it_was(version):
    modules, meta_path = dict(sys.modules), list(sys.meta_path)
    module = load_with_stubs(sglang_file(version, KIMI), "sglang.srt.models.kimi_k25")
    cls = getattr(module, TARGET)
    assert all(hasattr(cls, name) for name in METHODS) == (version != "0.5.9")
    assert isinstance(cls.__new__(cls), cls)
    assert sys.meta_path == meta_path
    assert not any(name.split(".")[0] in ("torch", "sglang", "transformers", "numpy") and name not in modules
                   for name in sys.modules)
    assert all(sys.modules.get(name) is value for name, value in modules.items())
