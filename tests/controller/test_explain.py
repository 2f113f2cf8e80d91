"""`drasat explain` prints the v1 controller's own decision (issue 22 Deliver 5): the text the
controller recorded for a refused pod, with its cycle and age; that no controller decided, or
that it has not tried the pod yet; that a recorded decision is stale, with a what-if made apart
and labelled as one. On the in-process API server, the controller stepped by hand."""

from __future__ import annotations

import datetime
import pathlib
from collections.abc import Callable
from typing import Any

import test_v1controller as base
from ctl_cluster import NS
from test_v1controller import _claim, _node, _pod, _settled, _status

from drasat.api.groups import SCHEDULING_GATE
from drasat.cli import main as cli
from drasat.controller import decisions, explain
from drasat.controller.v1controller import V1Controller
from drasat.kube import resources as r
from drasat.kube.client import KubeClient
from drasat.testbed.sim import apiserver

Obj = dict[str, Any]

# The in-process API server with drasat's DeviceClasses, and controllers stepped by hand.
server, api, controller = base.server, base.api, base.controller

OPTIONS = explain.Options(namespace=NS)


def _explain(api: KubeClient, pod: str, **kw: Any) -> str:
    return explain.explain(api, "default", pod, options=OPTIONS, **kw)


def _refused_one_of_two(api: KubeClient, ctl: V1Controller) -> str:
    """Two pods, one GPU: the key of the pod the controller refused."""
    assert _settled(ctl, lambda: len(ctl.explanations) == 1)
    (key,) = ctl.explanations
    return key


def test_explain_prints_exactly_the_controllers_decision_on_a_refused_pod(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 1)
    for i in (1, 2):
        _claim(api, f"c{i}")
        _pod(api, f"p{i}", f"c{i}")
    ctl = controller()
    key = _refused_one_of_two(api, ctl)
    text = _explain(api, key.split("/")[1])
    lines = text.splitlines()
    assert lines[0].startswith(f"drasat's controller decided in cycle {ctl.cycles}, ")
    assert "(policy default, digest " in lines[0] and "; online mode):" in lines[0]
    assert lines[1] == f"  pod {key} fits nowhere: {ctl.explanations[key]}"
    assert lines[2].endswith("this is its current decision.")
    assert "What-if" not in text


def test_explain_prints_the_controllers_memory_of_a_node_given_back(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    # kube-scheduler gave the claim back on n1 (PostFilter): the controller keeps the pod off n1
    # for a while. A what-if made apart (no memory) would put it on n1; explain prints the
    # controller's refusal.
    _node(api, "n1", 1)
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    ctl = controller()
    assert _settled(ctl, lambda: _status(api, "c1").get("allocation"))
    claim = api.get(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")
    claim["status"] = {}
    api.replace_status(r.RESOURCE_CLAIMS_V1, claim)
    assert _settled(ctl, lambda: "default/p1" in ctl.explanations)
    text = _explain(api, "p1")
    assert f"fits nowhere: {ctl.explanations['default/p1']}" in text
    assert "the scheduler could not bind the pod there lately" in text
    assert "would go to node" not in text


def test_explain_on_a_pod_no_controller_saw_says_so_and_labels_its_what_if(
    api: KubeClient,
) -> None:
    _node(api, "n1", 1)
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    lines = _explain(api, "p1").splitlines()
    assert lines[0] == (
        "No drasat controller has written a decision for pod default/p1 (and none holds the "
        f"Lease {NS}/drasat-controller; a controller without leader election holds none)."
    )
    assert lines[2].startswith("What-if now (made by drasat explain, not the controller's")
    assert "policy default (digest " in lines[2] and "online mode" in lines[2]
    assert lines[3] == "  pod default/p1 would go to node n1:"
    assert lines[4] == "    claim default/c1: gpu=gpu-0"


def test_explain_on_a_pod_a_running_controller_has_not_tried_yet_says_so(
    api: KubeClient,
) -> None:
    _node(api, "n1", 1)
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = {
        "metadata": {"name": "drasat-controller", "namespace": NS},
        "spec": {"holderIdentity": "drasat-controller-0", "leaseDurationSeconds": 15,
                 "acquireTime": now, "renewTime": now},
    }  # fmt: skip
    api.create(r.LEASES, lease, namespace=NS)
    text = _explain(api, "p1")
    assert text.startswith(
        "drasat's controller (drasat-controller-0) has not tried pod default/p1 yet (no decision)."
    )
    assert "What-if now" in text


def test_explain_on_a_stale_decision_says_what_changed_and_adds_a_what_if(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 1)
    for i in (1, 2):
        _claim(api, f"c{i}")
        _pod(api, f"p{i}", f"c{i}")
    ctl = controller()
    key = _refused_one_of_two(api, ctl)
    ctl.stop()  # no cycle decides again
    _node(api, "n2", 1)  # a node (NAS and slices) joins
    lines = _explain(api, key.split("/")[1]).splitlines()
    assert lines[1] == f"  pod {key} fits nowhere: {ctl.explanations[key]}"
    assert lines[2] == (
        "This decision is stale: drasat's devices or ledger (ResourceSlices, "
        "NodeAllocationStates) or its DeviceClasses changed since; the controller decides again "
        "in its next cycle."
    )
    assert lines[4].startswith("What-if now (made by drasat explain")
    assert lines[5] == f"  pod {key} would go to node n2:"


def test_the_decision_event_is_updated_not_repeated(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    # The same refusal decided again over changed objects updates the one Event (count, the
    # cycle): explain reads the latest decision and `kubectl describe` shows one line.
    _node(api, "n1", 1)
    for i in (1, 2):
        _claim(api, f"c{i}")
        _pod(api, f"p{i}", f"c{i}")
    ctl = controller()
    ctl.decisions.refresh = datetime.timedelta(0)
    key = _refused_one_of_two(api, ctl)
    first = _decision_events(api, key)
    assert len(first) == 1 and first[0][1].cycle <= ctl.cycles
    nas = api.get(r.NAS, "n1", namespace=NS)  # what it decides from changes, not the answer
    nas["metadata"]["labels"] = {"touched": "yes"}
    api.replace(r.NAS, nas)
    assert _settled(ctl, lambda: _decision_events(api, key)[0][1].cycle > first[0][1].cycle)
    event = _decision_events(api, key)[0][0]
    assert len(_decision_events(api, key)) == 1 and event["count"] == 2
    assert "Nothing it decided from has changed" in _explain(api, key.split("/")[1])


def _decision_events(api: KubeClient, key: str) -> list[tuple[Obj, decisions.Decision]]:
    namespace, name = key.split("/")
    found = api.list(r.EVENTS, namespace=namespace).items
    mine = [e for e in found if e["involvedObject"].get("name") == name]
    return decisions.recorded(mine)


def test_explain_says_why_the_controller_does_not_place_a_gated_pod(api: KubeClient) -> None:
    _node(api, "n1", 1)
    _claim(api, "c1")
    body = {
        "metadata": {"name": "gated", "namespace": "default"},
        "spec": {
            "schedulingGates": [{"name": "example.com/queue"}],
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "c1"}],
        },
    }
    api.create(r.PODS, body, namespace="default")
    assert _explain(api, "gated") == (
        "pod default/gated waits; drasat's controller does not place it now: it has scheduling "
        "gates (example.com/queue)"
    )


def test_the_cli_prints_it(
    api: KubeClient, server: apiserver.ApiServer, capsys: Any, tmp_path: pathlib.Path
) -> None:
    _node(api, "n1", 1)
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    argv = [
        "explain",
        "p1",
        "-n",
        "default",
        "--drasat-namespace",
        NS,
        "--kubeconfig",
        str(kubeconfig),
    ]
    assert cli.main([*argv, "--cycle-mode", "batch"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No drasat controller has written a decision for pod default/p1")
    assert "batch mode" in out and "  pod default/p1 would go to node n1:" in out


def test_explain_on_a_bound_pod_says_where_and_who_allocated_its_claim(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 1)
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    ctl = controller()
    assert _settled(ctl, lambda: _status(api, "c1").get("allocation"))
    assert _explain(api, "p1") == (
        "pod default/p1 is pending; its claims of drasat's are allocated (kube-scheduler binds "
        "the pod where they are):\n"
        "  claim default/c1: gpu=gpu-0 on node n1, allocated by drasat's controller"
    )
    # kube-scheduler binds it (what its binding cycle posts).
    binding = r.Resource("", "v1", "pods/p1/binding", "Binding")
    api.create(binding, {"metadata": {"name": "p1"}, "target": {"kind": "Node", "name": "n1"}},
               namespace="default")  # fmt: skip
    assert _explain(api, "p1") == (
        "pod default/p1 is bound to node n1:\n"
        "  claim default/c1: gpu=gpu-0 on node n1, allocated by drasat's controller"
    )


def test_the_cli_says_when_it_cannot_read_the_cluster(capsys: Any, tmp_path: pathlib.Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    assert cli.main(["explain", "p1", "--kubeconfig", str(kubeconfig)]) == 1
    assert capsys.readouterr().err.startswith("error: cannot read the cluster: ")


def _gated_pod(api: KubeClient, name: str, claim: str) -> None:
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        },
    }
    api.create(r.PODS, body, namespace="default")


def test_explain_says_drasats_gate_holds_a_refused_pod(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 1)
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    ctl = controller()
    assert _settled(ctl, lambda: _status(api, "c1").get("allocation"))
    _claim(api, "c2")
    _gated_pod(api, "held", "c2")
    assert _settled(ctl, lambda: "default/held" in ctl.explanations)
    text = _explain(api, "held")
    assert (
        f"held by drasat's scheduling gate {SCHEDULING_GATE} until drasat can allocate"
        in (text.splitlines()[1])
    )


def test_explain_says_drasat_lets_go_of_a_gated_pod_it_has_allocated(api: KubeClient) -> None:
    _node(api, "n1", 1)
    _claim(api, "c1")
    _gated_pod(api, "gated", "c1")
    claim = api.get(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")
    claim["status"] = {"allocation": {"devices": {"results": []}}}
    api.replace_status(r.RESOURCE_CLAIMS_V1, claim)
    assert _explain(api, "gated").endswith(
        f"drasat's controller lifts its scheduling gate {SCHEDULING_GATE} at its next cycle (a "
        "gate that stays means no controller runs)"
    )
