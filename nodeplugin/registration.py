"""Kubelet plugin registration (`pluginregistration.Registration`) on `<driver>-reg.sock`.

GetInfo tells the kubelet's plugin watcher the plugin type (`DRAPlugin`), the driver name, where
the DRA socket is and which service versions it speaks: semver-like `1.0.0` makes kubelets up to
1.31 call `v1alpha3.Node` (classic DRA); `v1.DRAPlugin`/`v1beta1.DRAPlugin` are what current
kubelets look for, and `v1.DRAResourceHealth`/`v1alpha1.DRAResourceHealth` tell them the plugin
streams device health (`healthservice.py`). NotifyRegistrationStatus is logged and remembered.
"""

from __future__ import annotations

import logging
import threading
from enum import StrEnum
from typing import Any

from drasat import DRIVER_NAME
from drasat.nodeplugin.gen import pluginregistration_v1_pb2 as pb2
from drasat.nodeplugin.gen import pluginregistration_v1_pb2_grpc as pb2_grpc
from drasat.nodeplugin.healthservice import SERVICE_NAMES as HEALTH_SERVICES

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"


class KubeletApi(StrEnum):
    classic = "classic"
    structured = "structured"
    both = "both"


VERSIONS: dict[KubeletApi, tuple[str, ...]] = {
    KubeletApi.classic: ("1.0.0",),
    KubeletApi.structured: ("v1.DRAPlugin", "v1beta1.DRAPlugin", *HEALTH_SERVICES),
    KubeletApi.both: ("1.0.0", "v1.DRAPlugin", "v1beta1.DRAPlugin", *HEALTH_SERVICES),
}


class Registration(pb2_grpc.RegistrationServicer):
    def __init__(self, *, endpoint: str, api: KubeletApi = KubeletApi.classic) -> None:
        self.endpoint = endpoint
        self.versions = VERSIONS[api]
        self.registered = threading.Event()
        self.last_error = ""

    def GetInfo(self, request: pb2.InfoRequest, context: Any) -> pb2.PluginInfo:
        return pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=DRIVER_NAME,
            endpoint=self.endpoint,
            supported_versions=list(self.versions),
        )

    def NotifyRegistrationStatus(
        self, request: pb2.RegistrationStatus, context: Any
    ) -> pb2.RegistrationStatusResponse:
        if request.plugin_registered:
            log.info("registered with the kubelet as %s (%s)", DRIVER_NAME, self.endpoint)
            self.last_error = ""
            self.registered.set()
        else:
            log.error("the kubelet refused the registration: %s", request.error)
            self.last_error = request.error
            self.registered.clear()
        return pb2.RegistrationStatusResponse()


def add_service(server: Any, servicer: Registration) -> None:
    add: Any = pb2_grpc.add_RegistrationServicer_to_server
    add(servicer, server)
