"""The NCCL / EFA / gloo environment for the workers, with the reason for each variable."""

from __future__ import annotations

from blackwell_sm.launch.topology import ResourceConfig, Topology
from blackwell_sm.opt_ml import ENV_DEVICE

# NCCL's socket auto-detection prefers `ib*` interfaces; on p6-b200 the `ibp*` devices are NVLink
# controllers, so bootstrap traffic must never go there.
SOCKET_IFNAME_EXCLUDE = "^lo,docker,ibp"


def _is_loopback(addr: str) -> bool:
    return addr in ("localhost", "::1") or addr.startswith("127.")


def network_env(
    topo: Topology, rc: ResourceConfig, environ: dict[str, str]
) -> tuple[dict[str, str], list[str], list[str]]:
    """(variables to set, variables to remove, notes) for this instance type.

    A value the user set explicitly is kept (and noted), except `NCCL_PROTO=simple`, which the
    SageMaker SDK driver forces on every job and which costs bandwidth on NVLink 5 / EFA.
    """
    add: dict[str, str] = {}
    remove: list[str] = []
    notes: list[str] = []

    def put(key: str, value: str, why: str) -> None:
        if key in environ and environ[key] != value:
            notes.append(
                f"{key}={environ[key]} kept from the environment (would set {value}: {why})"
            )
            return
        add[key] = value
        notes.append(f"{key}={value}: {why}")

    if environ.get("NCCL_PROTO", "").strip().lower() == "simple":
        remove.append("NCCL_PROTO")
        notes.append(
            "NCCL_PROTO=simple removed: inherited from the SageMaker SDK driver; NCCL picks "
            "LL/LL128/Simple per message size and forcing Simple slows small collectives"
        )
    elif "NCCL_PROTO" in environ:
        notes.append(f"NCCL_PROTO={environ['NCCL_PROTO']} kept (set explicitly, not by us)")

    if topo.device == "cpu":
        put(ENV_DEVICE, "cpu", "the plan is for local CPU processes (gloo)")
        if _is_loopback(topo.master_addr):
            put("GLOO_SOCKET_IFNAME", "lo", "master address is loopback: gloo binds to lo")
        return add, remove, notes

    # The SDK's driver only sets FI_PROVIDER=efa up to p5e: p5en/p6 would silently use TCP.
    if topo.efa:
        put("FI_PROVIDER", "efa", "aws-ofi-nccl over EFA; the SDK driver omits it after p5e")
        put("FI_EFA_USE_DEVICE_RDMA", "1", "GPUDirect RDMA over EFA")
        put("FI_EFA_USE_HUGE_PAGE", "0", "AWS guidance for current libfabric")
    iface = rc.network_interface_name
    if iface and not iface.startswith("ibp"):
        put("NCCL_SOCKET_IFNAME", iface, "resourceconfig network_interface_name")
        put("GLOO_SOCKET_IFNAME", iface, "resourceconfig network_interface_name")
    else:
        if iface:
            notes.append(f"network_interface_name {iface!r} is an NVLink (ibp*) device: ignored")
        put("NCCL_SOCKET_IFNAME", SOCKET_IFNAME_EXCLUDE, "never loopback, docker or ibp* (NVLink)")
    if "NCCL_DEBUG" not in environ:
        put("NCCL_DEBUG", "INFO", "so the launcher can report the network NCCL chose")
        put("NCCL_DEBUG_SUBSYS", "INIT,NET", "only the init and network lines")
    return add, remove, notes
