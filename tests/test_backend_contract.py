"""One typed back-end contract (issue 87): :mod:`algorithms.contract` declares what an
algorithm may ask of its kernel blocks (:class:`~algorithms.contract.KernelBlocks`), of the
columns they hold (:class:`~algorithms.contract.KernelColumns`,
:class:`~algorithms.contract.CholeskyColumns`) and of the exact GP's factor
(:class:`~algorithms.contract.CholeskyFactor`); every back end (memory, zarr store, torch
device, store on a device, Dask cluster) has every member, the optional ones by inheriting the
protocol's in-memory defaults, and algorithms/ reaches a back end through those members only:
no ``getattr``/``hasattr`` probe. Where an algorithm runs is declared on its spec
(``device_blocks``, ``float64_only``) and checked with the rest of a job's config, before any
data are read."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path
from typing import Protocol

import numpy as np
import pytest

from algorithms.contract import CholeskyColumns, CholeskyFactor, KernelBlocks, KernelColumns
from algorithms.errors import InputError
from algorithms.kernels import Kernel
from algorithms.registry import REGISTRY

ROOT = Path(__file__).resolve().parent.parent

# the getattr/hasattr calls algorithms/ keeps, none on a back end: (file, the call's first
# argument as written) → why it is not a probe of kernel blocks or their columns
NOT_PROBES = {
    ("__init__.py", "importlib.import_module(f'{__name__}.{_WHERE[name]}')"):
        "the package's lazy exports: a name from the module that defines it",
    ("device.py", "torch"): "LazyTorch forwards an attribute to the torch module it imports",
    ("device.py", "import_torch(f'precision={dtype}')"): "torch's dtype named by precision=",
    ("registry.py", "module"): "an algorithm module's SPECS (none: not an algorithm's module)",
}


def _probes() -> list[tuple[str, str, int]]:
    """Every getattr/hasattr call in algorithms/: (file, first argument, line)."""
    found = []
    for path in sorted((ROOT / "algorithms").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and node.args):
                found.append((path.name, ast.unparse(node.args[0]), node.lineno))
    return found


def test_algorithms_probe_no_back_end():
    """A capability an algorithm needs of its blocks is a protocol member (with a default
    where back ends differ), never a ``getattr(blocks, "…", default)``: the only getattr and
    hasattr calls left are the justified few of :data:`NOT_PROBES`, none on a back end."""
    probes = [(name, arg, line) for name, arg, line in _probes()
              if (name, arg) not in NOT_PROBES]
    assert probes == [], probes
    on_back_ends = [p for p in _probes() if any(
        word in p[1] for word in ("blocks", "columns", "factor", "self.W", "chol"))]
    assert on_back_ends == []


def _members(protocol: type) -> set[str]:
    """The members a protocol declares: its annotated attributes and its public methods."""
    return ({name for name in vars(protocol) if not name.startswith("_")}
            | set(protocol.__annotations__))


def _defaults(protocol: type) -> set[str]:
    """The members the protocol itself gives a value or a body beyond its docstring."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(protocol))).body[0]
    with_value = {node.target.id for node in tree.body
                  if isinstance(node, ast.AnnAssign) and node.value is not None}
    with_body = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)
                 and any(not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
                         for s in node.body)}
    return with_value | with_body


def _defined(cls: type, protocol: type) -> set[str]:
    """The names a back end's own classes (its MRO up to the protocol) define: attributes,
    methods and properties, and the ``self.<name>`` its methods assign."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass in (protocol, Protocol, object) or klass.__module__ == "typing":
            continue
        names |= set(vars(klass))
        source = textwrap.dedent(inspect.getsource(klass))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
    return names


def _back_ends() -> list[tuple[type, type]]:
    """(protocol, back end) for every back end of the project (torch and distributed imported:
    their classes are only inspected, nothing runs)."""
    from algorithms.cholesky import HostCholesky
    from algorithms.factor_columns import ArrayCholeskyColumns
    from algorithms.kernel_blocks import ArrayKernelBlocks, ArrayKernelColumns
    from algorithms.torch_blocks import (
        DeviceCholesky,
        TorchCholeskyColumns,
        TorchKernelBlocks,
        TorchKernelColumns,
    )
    from pipeline.blocks.cluster import ClusterCholeskyColumns, ClusterKernelBlocks
    from pipeline.blocks.cluster_columns import ClusterColumns
    from pipeline.blocks.device import StoreDeviceBlocks
    from pipeline.blocks.store import ZarrKernelBlocks

    return [(KernelBlocks, c) for c in (ArrayKernelBlocks, ZarrKernelBlocks, ClusterKernelBlocks,
                                        TorchKernelBlocks, StoreDeviceBlocks)] + \
        [(KernelColumns, c) for c in (ArrayKernelColumns, TorchKernelColumns, ClusterColumns)] + \
        [(CholeskyColumns, c) for c in (ArrayCholeskyColumns, TorchCholeskyColumns,
                                        ClusterCholeskyColumns)] + \
        [(CholeskyFactor, c) for c in (HostCholesky, DeviceCholesky)]


@pytest.mark.parametrize(("protocol", "back_end"), _back_ends(),
                         ids=lambda x: x.__name__)
def test_every_back_end_has_every_member(protocol, back_end):
    """Each member of the protocol is the back end's own (defined by it or a class it derives
    from, or assigned by its methods), or a default the back end inherits from the protocol;
    a protocol with defaults is the base class of its back ends, so none is left out."""
    defaults = _defaults(protocol)
    if defaults:
        assert protocol in back_end.__mro__, f"{back_end.__name__} must derive from " \
                                             f"{protocol.__name__} to inherit its defaults"
    missing = _members(protocol) - _defined(back_end, protocol) - defaults
    assert not missing, f"{back_end.__name__} lacks {sorted(missing)} of {protocol.__name__}"


def test_every_kernel_block_back_end_is_checked():
    """Every class deriving from KernelBlocks, once every provider of ``blocks=`` and the device
    provider are imported, is in the table above: a new back end cannot escape the check."""
    import importlib

    from pipeline.blocks import DEVICE_PROVIDER, PROVIDERS

    for module in (*PROVIDERS.values(), DEVICE_PROVIDER):
        importlib.import_module(module)

    def below(cls: type) -> set[type]:
        return {c for sub in cls.__subclasses__() for c in (sub, *below(sub))}

    checked = {c for protocol, c in _back_ends() if protocol is KernelBlocks}
    # the project's classes (tests derive their own doubles, e.g. blocks that count calls)
    found = {c for c in below(KernelBlocks) if c.__module__.split(".")[0] in ("algorithms",
                                                                              "pipeline")}
    assert found <= checked, sorted(c.__name__ for c in found - checked)


def test_the_protocols_declare_what_the_algorithms_use():
    """The members that used to be probed for are declared, with the in-memory defaults, and a
    back end on a device changes them."""
    import torch

    from algorithms.kernel_blocks import ArrayKernelBlocks
    from algorithms.torch_blocks import TorchKernelBlocks

    assert {"d", "memory_on_device", "hold_dropped", "device", "summary",
            "factor"} <= _members(KernelBlocks)
    assert "top" in _members(CholeskyColumns)
    assert _defaults(KernelBlocks) == {"memory_on_device", "hold_dropped", "device", "summary"}
    X, kernel = np.random.default_rng(0).normal(size=(30, 2)), Kernel("rbf", {"width": 1.0})
    memory = ArrayKernelBlocks(X, kernel)
    assert (memory.d, memory.memory_on_device, memory.hold_dropped, memory.device,
            memory.summary()) == (2, False, False, None, {})
    device = TorchKernelBlocks(X, kernel, torch.device("cpu"))
    assert device.memory_on_device and device.device == torch.device("cpu")
    noise = np.full(30, 0.1)
    y = np.sin(X[:, 0])
    on_host, on_device = memory.factor(None, noise), device.factor(None, noise)
    np.testing.assert_allclose(on_device.solve(y), on_host.solve(y), rtol=1e-10)
    np.testing.assert_allclose(on_device.log_diag_sum(), on_host.log_diag_sum(), rtol=1e-12)


def _device_error(spec, device: str, precision: str, blocks: str = "memory") -> str | None:
    from pipeline.job.validate import check_device

    try:
        check_device(spec, device, precision, blocks)
    except InputError as err:
        return str(err)
    return None


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_the_spec_says_where_an_algorithm_runs(name):
    """``device_blocks`` and ``float64_only`` on the spec are what the device check accepts
    (no list of names elsewhere): a torch device for the algorithms that declare it, float32
    there unless float64 only, the rows in this process, and ``cpu`` for every algorithm."""
    import algorithms.torch_blocks

    spec = REGISTRY[name]
    assert not hasattr(algorithms.torch_blocks, "DEVICE_ALGORITHMS")
    assert not hasattr(algorithms.torch_blocks, "FLOAT64_ONLY")
    assert spec.device_blocks or not spec.float64_only
    assert _device_error(spec, "cpu", "float64") is None
    for device in ("torch:cpu", "cuda", "cuda:1"):
        refused = _device_error(spec, device, "float64")
        if spec.device_blocks:
            assert refused is None
        else:
            assert refused.startswith(f"algorithm {name} does not run on device={device}; "
                                      "pass device=cpu, or one of: ")
            assert "exact" in refused
    float32 = _device_error(spec, "torch:cpu", "float32")
    assert (float32 is None) == (spec.device_blocks and not spec.float64_only)
    if spec.device_blocks:
        assert _device_error(spec, "cuda", "float64", "cluster") == (
            "blocks=cluster runs on the CPU workers; with device=cuda pass blocks=memory")


def test_a_device_job_is_refused_before_its_data_are_read(tmp_path):
    """The device check is part of the config check (:func:`pipeline.job.validate.checked`),
    so a job or a sweep stops with it before anything is ingested: the dataset's store is
    never made."""
    from pipeline.job.validate import check_config

    config = {"algorithm": {"name": "rvm"}, "dataset": {"name": "friedman1", "n_train": 50},
              "kernel": {"name": "rbf", "width": 1.0}, "lam": 0.1, "kappa": 5, "seed": 0,
              "device": "torch:cpu", "store_root": str(tmp_path / "stores")}
    with pytest.raises(InputError, match=r"^algorithm rvm does not run on device=torch:cpu; "):
        check_config(config)
    config = {**config, "algorithm": {"name": "gpytorch_sgpr"}, "precision": "float32"}
    with pytest.raises(InputError, match=r"^algorithm gpytorch_sgpr computes in float64 only"):
        check_config(config)
    assert not (tmp_path / "stores").exists()
