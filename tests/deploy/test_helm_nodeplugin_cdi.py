"""The chart's node-plugin values for the CDI spec: driver and dev roots, `cdi.mode`, the hook path
and the toolkit's spec folders reach `drasat nodeplugin` as flags it parses into its Config, with
the mounts the plugin reads them through; bad values are refused by the schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chart_rendering import Manifest, Render
from test_helm_chart import validate_all

from drasat.cli import main
from drasat.cli import nodeplugin as nodeplugin_cli
from drasat.nodeplugin import cdi


def _plugin(rendered: Any) -> tuple[Manifest, Any]:
    """The DaemonSet's container, and its arguments parsed by `drasat nodeplugin` itself."""
    assert rendered.returncode == 0, rendered.stderr
    daemonset = rendered.one("DaemonSet", "-node-plugin")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    args = [a for a in container["args"] if not a.startswith("--log-level")]
    parsed = main.build_parser(only="nodeplugin").parse_args(args)
    return daemonset, nodeplugin_cli.options(parsed).config


def _mounts(daemonset: Manifest) -> dict[str, tuple[Manifest, Manifest]]:
    volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    return {m["name"]: (m, volumes[m["name"]]) for m in container["volumeMounts"]}


def test_defaults(render: Render) -> None:
    rendered = render()
    daemonset, config = _plugin(rendered)
    assert (config.driver_root, config.driver_root_mount) == ("/", "/driver-root")
    assert (config.dev_root, config.dev_root_mount) == ("", "")  # the plugin decides
    assert config.cdi_mode is cdi.CdiMode.drasat
    assert config.cdi_hook_path == "/usr/bin/nvidia-cdi-hook"
    mounts = _mounts(daemonset)
    assert mounts["driver-root"][0]["mountPath"] == "/driver-root"
    assert not any(n.startswith(("toolkit-spec", "dev-root")) for n in mounts)
    validate_all(rendered.manifests)


@pytest.mark.parametrize(
    ("dev_root", "mount", "volume"),
    [
        ("/", "/", None),
        ("/run/nvidia/driver", "/driver-root", None),
        ("/srv/dev", "/dev-root", "/srv/dev"),
    ],
)
def test_dev_root(render: Render, dev_root: str, mount: str, volume: str | None) -> None:
    daemonset, config = _plugin(
        render("nodePlugin.driverRoot=/run/nvidia/driver", f"nodePlugin.devRoot={dev_root}")
    )
    assert (config.dev_root, config.dev_root_mount) == (dev_root, mount)
    mounts = _mounts(daemonset)
    if volume is None:
        assert "dev-root" not in mounts
    else:
        assert mounts["dev-root"][0]["mountPath"] == "/dev-root"
        assert mounts["dev-root"][1]["hostPath"]["path"] == volume


def test_toolkit_mode_mounts_the_toolkits_specs(render: Render) -> None:
    rendered = render(
        "nodePlugin.cdi.mode=toolkit", "nodePlugin.cdi.hookPath=", "nodePlugin.cdiRoot=/var/run/cdi"
    )
    daemonset, config = _plugin(rendered)
    assert config.cdi_mode is cdi.CdiMode.toolkit
    assert config.cdi_hook_path == ""
    assert config.toolkit_spec_dirs == (Path("/etc/cdi"), Path("/var/run/cdi"))
    mounts = _mounts(daemonset)
    # /var/run/cdi is the plugin's own CDI root, mounted read-write already
    assert mounts["toolkit-spec-0"][0] == {
        "name": "toolkit-spec-0",
        "mountPath": "/etc/cdi",
        "readOnly": True,
    }
    assert "toolkit-spec-1" not in mounts
    validate_all(rendered.manifests)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("nodePlugin.cdi.mode=nvidia", "/nodePlugin/cdi/mode"),
        ("nodePlugin.cdi.hookPath=usr/bin/hook", "/nodePlugin/cdi/hookPath"),
        ("nodePlugin.devRoot=dev", "/nodePlugin/devRoot"),
        ("nodePlugin.cdi.driverRoot=/x", "driverRoot"),
    ],
)
def test_bad_values_are_refused(render: Render, value: str, error: str) -> None:
    rendered = render(value)
    assert rendered.returncode != 0
    assert error in rendered.stderr
