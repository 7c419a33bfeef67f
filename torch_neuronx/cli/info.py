"""``torchneuron info``: what ``neuron-ls`` shows, for the emulated instance."""
from __future__ import annotations

import argparse
import json


def collect() -> dict:
    import torch

    import torch_neuronx  # noqa: F401
    from torch_neuronx.projection import price

    topo = torch.neuron.topology()
    profile = topo.profile
    cores = []
    for i in range(torch.neuron.device_count()):
        free, total = torch.neuron.mem_get_info(i)
        cores.append({"index": i, "hbm_bytes": total, "free_bytes": free})
    return {
        "emulated": True,
        "instance_type": profile.name,
        "family": profile.family,
        "figures_confirmed": profile.confirmed,
        "chips": profile.chips,
        "physical_cores_per_chip": profile.cores_per_chip,
        "logical_nc_config": topo.lnc,
        "logical_cores_total": topo.total_logical_cores,
        "visible_cores": topo.device_count,
        "hbm_per_core_bytes": topo.hbm_per_core,
        "price": price(profile.name).to_dict(),
        "torch_version": torch.__version__,
        "cores": cores,
        "fidelity": _fidelity(),
    }


def _fidelity() -> dict:
    """Cache location and size, plus the switches that change what is reported."""
    import torch_neuronx

    snapshot = torch_neuronx.metrics()
    return {
        "neff_cache": snapshot["neff_cache"],
        "kernel_accounting": snapshot["accounting_enabled"],
        "int64_float64_mode": snapshot["int64_float64_mode"],
        "compile_seconds_per_kernel_estimate": snapshot["compile_seconds_per_kernel_estimate"],
    }


def render(info: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(
        f"[bold]{info['instance_type']}[/bold] ({info['family']}) — "
        "[yellow]NeuronCores are emulated on the host CPU; device memory is host RAM "
        "accounted per core[/yellow]"
    )
    table = Table(show_header=False, box=None)
    gib = 2**30
    price = info["price"]
    rows = [
        ("chips", info["chips"]),
        ("physical cores per chip", info["physical_cores_per_chip"]),
        ("logical NeuronCore config (LNC)", info["logical_nc_config"]),
        ("logical cores on the instance", info["logical_cores_total"]),
        ("cores visible to this process", info["visible_cores"]),
        ("HBM per logical core", f"{info['hbm_per_core_bytes'] / gib:.1f} GiB"),
        ("price per hour", f"${price['usd_per_hour']:.2f} ({price['region']}, {price['date']}: {price['source']})"
         if price["usd_per_hour"] is not None else price["source"]),
        ("figures confirmed by AWS docs", "yes" if info["figures_confirmed"] else "no (widely reported)"),
        ("torch", info["torch_version"]),
        *_fidelity_rows(info["fidelity"]),
    ]
    for key, value in rows:
        table.add_row(f"[cyan]{key}[/cyan]", str(value))
    console.print(table)


def _fidelity_rows(fidelity: dict) -> list[tuple[str, str]]:
    cache = fidelity["neff_cache"]
    if cache["enabled"]:
        where = f"{cache['dir']} ({cache['entries']} entries, {cache['bytes'] / 2**20:.1f} MiB)"
    else:
        where = "disabled (TORCH_NEURONX_NEFF_DISABLE_CACHE=1)"
    return [
        ("NEFF cache (emulated)", where),
        ("kernel accounting", "on" if fidelity["kernel_accounting"] else "off (TORCHNEURON_KERNEL_ACCOUNTING=0)"),
        ("int64 / float64 on device", fidelity["int64_float64_mode"]),
        ("compile time per kernel", f"{fidelity['compile_seconds_per_kernel_estimate']:g} s (estimate)"),
    ]


def run(args: argparse.Namespace) -> int:
    from torch_neuronx.runtime.exit_codes import ExitCode

    if args.instance:
        import torch_neuronx

        torch_neuronx.reconfigure(instance=args.instance)
    info = collect()
    if args.json:
        print(json.dumps(info, indent=2, allow_nan=False))  # strict JSON: NaN/Infinity are not JSON
    else:
        render(info)
    return ExitCode.SUCCESS


def add_parser(sub) -> None:
    parser = sub.add_parser("info", help="show the emulated instance, its cores and HBM")
    from torch_neuronx.cli.options import add_instance

    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    add_instance(parser, "the cores, HBM and price shown")
    parser.set_defaults(func=run)
