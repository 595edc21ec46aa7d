# SPDX-License-Identifier: MIT
"""kvdist's Python interface against llm_datadist's (llm_datadist_api.py, taken from its
sources): every class, method, property, enum member and module function that llm_datadist has,
kvdist has, with llm_datadist's positional order, parameter names and defaults. kvdist may add
keyword-only parameters after llm_datadist's, each listed in EXTRA_KEYWORDS with its reason;
everything else it does differently is listed in DIFFERENCES with its reason. Neither list may
name what is not there."""

import enum
import inspect

import pytest

import kvdist
from kvdist import (BlocksCacheKey, Cache, CacheDesc, CacheKey, CacheKeyByIdAndIndex, DataType,
                    KvCache, LLMClusterInfo, LLMDataDist, LLMException, LLMRole, LLMStatusCode,
                    LlmConfig, MemInfo, Memtype, Placement, Status, TransferConfig,
                    TransferWithCacheKeyConfig)

import llm_datadist_api as api

# Keyword-only parameters kvdist adds after llm_datadist's, and why.
_TIMEOUT = "kvdist's: this call's deadline instead of sync_kv_timeout"
_NOTIFY = "kvdist's: bytes the destination receives once the push landed"
_PULL_NOTIFY = "kvdist's: bytes the source receives once every byte was read"
_REMOTE_INFO = ("kvdist's: the remote cluster's LLMDataDist.local_info(); links first when no "
                "link joins the two")
_SLICE = ("kvdist's head slices: (offset, length) of each block on that side, so caches of "
          "different block sizes (tensor parallelism) meet")
EXTRA_KEYWORDS = {
    "LLMException.__init__": {"kvd_status": "kvdist's: the libkvdist status behind the code"},
    "CacheManager.pull_cache": {"timeout_ms": _TIMEOUT, "notify": _PULL_NOTIFY,
                                "remote_info": _REMOTE_INFO},
    "CacheManager.pull_blocks": {"timeout_ms": _TIMEOUT, "notify": _PULL_NOTIFY,
                                 "remote_info": _REMOTE_INFO, "src_slice": _SLICE,
                                 "dst_slice": _SLICE},
    "CacheManager.push_cache": {"timeout_ms": _TIMEOUT, "notify": _NOTIFY,
                                "remote_info": _REMOTE_INFO},
    "CacheManager.push_blocks": {"timeout_ms": _TIMEOUT, "notify": _NOTIFY,
                                 "remote_info": _REMOTE_INFO, "src_slice": _SLICE,
                                 "dst_slice": _SLICE},
    "CacheManager.transfer_cache_async": {"notify": _NOTIFY + " (every layer)"},
}

# What kvdist does differently from llm_datadist's interface, and why.
DIFFERENCES = {
    "CacheManager.set_is_call_linked": (
        "absent: llm_datadist's internal hook, which its LLMDataDist.link() calls to change "
        "register_cache()'s remote_accessible default after a link; engine code does not call "
        "it, and kvdist's daemon decides what a registration may be reached by"),
    "CacheManager.pull_cache **kwargs": (
        "kvdist names the keywords llm_datadist reads from **kwargs (src_layer_range, "
        "dst_layer_range, tensor_num_per_layer) as keyword-only parameters with its defaults: "
        "a misspelt keyword raises TypeError instead of being ignored"),
    "CacheManager.pull_blocks **kwargs": "as pull_cache's",
    "CacheKey both names": (
        "cluster_id= and prompt_cluster_id= together, or an argument given by position and by "
        "name, are refused (LLM_PARAM_INVALID); llm_datadist takes one of them silently"),
    "BlocksCacheKey both names": "as CacheKey's",
    "LLMStatusCode values": (
        "llm_datadist takes its codes' values from its C++ wrapper; kvdist numbers them itself "
        "(LLM_UNKNOWN_ERROR is -1 in both) and adds its own codes from 100 on"),
    "DataType values": (
        "kvdist's values are libkvdist's kvd_dtype, llm_datadist's its wrapper's; DT_STRING "
        "(13) is no kvd_dtype and is refused where a cache of it would be made"),
    "IntEnum for Enum": (
        "kvdist's DataType and RegisterMemStatus are IntEnums (llm_datadist: Enum), so that "
        "they pass to libkvdist as they are; they are still Enums"),
}


def _params(sig, drop_first):
    """A signature as the table writes parameter lists."""
    out = []
    star = False
    params = list(sig.parameters.values())
    if drop_first:
        params = params[1:]
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            out.append(f"*{p.name}")
            star = True
            continue
        if p.kind == p.VAR_KEYWORD:
            out.append(f"**{p.name}")
            continue
        if p.kind == p.KEYWORD_ONLY and not star:
            out.append("*")
            star = True
        out.append(p.name if p.default is p.empty else (p.name, p.default))
    return out


def _expected(entry):
    """A table parameter list with its defaults evaluated over kvdist's names."""
    out = []
    for p in entry:
        if "=" in p:
            name, default = p.split("=", 1)
            out.append((name, eval(default, vars(kvdist))))
        else:
            out.append(p)
    return out


def _same(a, b):
    if isinstance(a, tuple) and isinstance(b, tuple):
        return a[0] == b[0] and type(a[1]) is type(b[1]) and a[1] == b[1]
    return a == b


def _kvdist_class(name):
    return getattr(kvdist, name)


def _member(qualname):
    cls_name, attr = qualname.split(".")
    cls = _kvdist_class(cls_name)
    return cls, inspect.getattr_static(cls, attr)


def test_table_is_llm_datadists():
    assert api.HIXL_COMMIT == "9ed283b27309463ed0faa490b79c0dc9ddef6377"
    # What the table must hold for the comparisons below to mean something.
    assert "CacheManager.pull_blocks" in api.SIGNATURES and "BlocksCacheKey" in api.BINDINGS
    assert set(api.V2_LIST) <= set(api.CLASSES)


def test_v2_list_and_modules():
    assert set(kvdist.v2_list) == set(api.V2_LIST)
    for name in api.CLASSES:
        assert hasattr(kvdist, name), f"kvdist has no {name}"
    for module, names in api.MODULES.items():
        mod = getattr(kvdist, module)
        for name in names:
            assert hasattr(mod, name), f"kvdist.{module} has no {name}"
            assert name in mod.__all__, f"kvdist.{module}.__all__ lacks {name}"


@pytest.mark.parametrize("qualname", sorted(api.SIGNATURES))
def test_signature(qualname):
    if qualname in DIFFERENCES:
        cls_name, attr = qualname.split(".")
        assert not hasattr(_kvdist_class(cls_name), attr), f"{qualname} exists: say so"
        return
    cls, member = _member(qualname)
    kind = api.KINDS.get(qualname)
    if kind == "classmethod":
        assert isinstance(member, classmethod), f"{qualname} is not a classmethod"
    elif kind == "staticmethod":
        assert isinstance(member, staticmethod), f"{qualname} is not a staticmethod"
    else:
        assert inspect.isfunction(member), f"{qualname} is not a plain method"
    fn = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
    got = _params(inspect.signature(fn), drop_first=kind != "staticmethod")
    want = _expected(api.SIGNATURES[qualname])
    if want and want[-1] == "**kwargs" and qualname in api.KWARGS:
        # kvdist spells out what llm_datadist reads from **kwargs (DIFFERENCES).
        assert f"{qualname} **kwargs" in DIFFERENCES
        want = want[:-1]
        if not any(isinstance(p, str) and p.startswith("*") for p in want):
            want.append("*")
        want += _expected(api.KWARGS[qualname])
    head, extra = got[:len(want)], got[len(want):]
    assert len(head) == len(want) and all(_same(g, w) for g, w in zip(head, want)), \
        f"{qualname}: kvdist has {got}, llm_datadist {want}"
    # Anything more is a listed keyword-only parameter.
    listed = EXTRA_KEYWORDS.get(qualname, {})
    if extra:
        star = [i for i, p in enumerate(got)
                if isinstance(p, str) and p.startswith("*") and not p.startswith("**")]
        assert star and star[0] <= len(want), f"{qualname}: {extra} are not keyword-only"
    names = [p if isinstance(p, str) else p[0] for p in extra if p != "*"]
    assert names == list(listed), f"{qualname}: extra parameters {names}, listed {list(listed)}"


def test_extra_keywords_are_llm_datadists_methods():
    for qualname in EXTRA_KEYWORDS:
        assert qualname in api.SIGNATURES


@pytest.mark.parametrize("name", sorted(api.BASES))
def test_bases(name):
    cls = _kvdist_class(name)
    for base in api.BASES[name]:
        want = {"IntEnum": enum.IntEnum, "Enum": enum.Enum, "RuntimeError": RuntimeError,
                "ABC": object, "object": object}[base]
        assert issubclass(cls, want), f"{name} is no {base}"
    if name == "LayerSynchronizer":
        assert inspect.isabstract(cls)


@pytest.mark.parametrize("name", sorted(api.MEMBERS))
def test_enum_members(name):
    cls = _kvdist_class(name)
    for member, value in api.MEMBERS[name].items():
        assert member in cls.__members__, f"{name} has no {member}"
        if value is not None:
            assert cls[member].value == value, f"{name}.{member} is {cls[member].value}"
    # The values llm_datadist gives no literal for stay distinct in kvdist.
    names = list(api.MEMBERS[name])
    assert len({cls[m] for m in names}) == len(names)


def _host_desc():
    return CacheDesc(2, [4, 8], DataType.DT_UINT8, Placement.HOST)


# One kvdist object of each class with properties, made without a daemon. The cpu caches'
# addresses are never touched here: nothing copies from them.
_INSTANCES = {
    "LLMClusterInfo": LLMClusterInfo, "LlmConfig": LlmConfig,
    "LLMException": lambda: LLMException("x", status_code=LLMStatusCode.LLM_FAILED),
    "Status": lambda: Status(LLMStatusCode.LLM_SUCCESS),
    "MemInfo": lambda: MemInfo(Memtype.MEM_TYPE_DEVICE, 1, 1),
    "CacheDesc": lambda: CacheDesc(2, [4, 8], DataType.DT_UINT8),
    "Cache": lambda: Cache.create_cpu_cache(_host_desc(), [4096, 8192]),
    "KvCache": lambda: KvCache.create_cpu_cache(_host_desc(), [[4096, 8192]]),
    "BlocksCacheKey": lambda: BlocksCacheKey(1), "CacheKey": lambda: CacheKey(1, 2),
    "CacheKeyByIdAndIndex": lambda: CacheKeyByIdAndIndex(1, 2),
    "TransferWithCacheKeyConfig": lambda: TransferWithCacheKeyConfig(
        BlocksCacheKey(1), range(0, 1), range(0, 1)),
    "TransferConfig": lambda: TransferConfig(1, [4096]),
    "LLMDataDist": lambda: LLMDataDist(LLMRole.PROMPT, 1),
}


@pytest.mark.parametrize("name", sorted(api.PROPERTIES))
def test_properties(name):
    obj = _INSTANCES[name]()
    for prop, settable in api.PROPERTIES[name].items():
        static = None
        for klass in type(obj).__mro__:
            if prop in vars(klass):
                static = vars(klass)[prop]
                break
        if static is None:
            assert prop in vars(obj), f"{name} has no {prop}"
            continue  # a plain attribute: readable and settable
        assert isinstance(static, (property, type(CacheKey.req_id))), \
            f"{name}.{prop} is a {type(static).__name__}, not a property"
        if settable and isinstance(static, property):
            assert static.fset is not None, f"{name}.{prop} cannot be set"


@pytest.mark.parametrize("qualname", sorted(api.FUNCTIONS))
def test_module_functions(qualname):
    module, name = qualname.split(".")
    fn = getattr(getattr(kvdist, module), name)
    got = _params(inspect.signature(fn), drop_first=False)
    want = _expected(api.FUNCTIONS[qualname])
    assert len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want)), \
        f"{qualname}: kvdist has {got}, llm_datadist {want}"


def test_async_forms_take_what_the_synchronous_ones_take():
    cm = kvdist.CacheManager
    for name in ("pull_cache", "pull_blocks", "push_cache", "push_blocks"):
        sync, task = inspect.signature(getattr(cm, name)), inspect.signature(
            getattr(cm, name + "_async"))
        assert sync == task, f"{name}_async{task} differs from {name}{sync}"


# --- the constructors that bind (*args, **kwargs) themselves -------------------------------


def _key_fields(key, names):
    return {n: getattr(key, n) for n in names}


@pytest.mark.parametrize("name", sorted(api.BINDINGS))
def test_binding(name):
    b = api.BINDINGS[name]
    cls = _kvdist_class(name)
    positional = b["positional"]
    defaults = {k: eval(v, vars(kvdist)) for k, v in b["defaults"].items()}
    values = {n: 10 + i for i, n in enumerate(positional)}
    # By position, by keyword, and with cluster_id by its other name: the same key.
    by_position = cls(*values.values())
    assert _key_fields(by_position, positional) == values
    assert cls(**values) == by_position
    renamed = dict(values)
    renamed["prompt_cluster_id"] = renamed.pop("cluster_id")
    assert set(renamed) <= set(b["keywords"])
    key = cls(**renamed)
    assert key == by_position and key.prompt_cluster_id == key.cluster_id == 10
    # What may be left out takes llm_datadist's defaults.
    required = {n for group in b["required"] for n in group if n in positional}
    minimal = {n: v for n, v in values.items() if n in required}
    key = cls(**minimal)
    for n in positional:
        assert getattr(key, n) == (values[n] if n in required else defaults[n])
    # What llm_datadist refuses, kvdist refuses as it does.
    for group in b["required"]:
        missing = {n: v for n, v in renamed.items() if n not in group}
        with pytest.raises(LLMException) as e:
            cls(**missing)
        assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    with pytest.raises(LLMException) as e:
        cls(*values.values(), 1)
    assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    assert b["max_args"] == len(positional)
    with pytest.raises(LLMException) as e:
        cls(1, no_such_param=2)
    assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    # DIFFERENCES: both names of cluster_id, or one argument twice, are refused.
    assert f"{name} both names" in DIFFERENCES
    with pytest.raises(LLMException):
        cls(cluster_id=1, prompt_cluster_id=1)
    with pytest.raises(LLMException):
        cls(1, cluster_id=1)


def test_vllm_ascend_keys():
    # vllm-ascend's llm_datadist connector, register_kv_caches(): the keyword names.
    key = BlocksCacheKey(cluster_id=3, model_id=0)
    assert key == BlocksCacheKey(3) == BlocksCacheKey(prompt_cluster_id=3, model_id=0)
    assert CacheKey(cluster_id=3, req_id=7) == CacheKey(prompt_cluster_id=3, req_id=7,
                                                        model_id=0)
    with pytest.raises(TypeError):
        BlocksCacheKey(cluster_id="3")


def test_differences_name_what_exists():
    for what in DIFFERENCES:
        qualname = what.split(" ")[0]
        if "." in qualname:
            assert qualname in api.SIGNATURES, what
        elif qualname not in ("LLMStatusCode", "DataType", "IntEnum"):
            assert qualname in api.CLASSES, what
