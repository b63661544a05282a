"""mpirun / mpiexec of Open MPI, MPICH, Intel MPI and MVAPICH2: they start the ranks themselves."""

from __future__ import annotations

import subprocess

from guard.launchers.record import Launcher, Layer, RankVariables, Scope, Spelling, WorldReading, WorldWriting, number

# ompi/runtime (Open MPI), PMI (MPICH's and Intel MPI's Hydra), MVAPICH2's mpirun_rsh
OPEN_MPI = RankVariables("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
                         "OMPI_COMM_WORLD_LOCAL_SIZE")
HYDRA = RankVariables("MPICH / Intel MPI", "PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", "MPI_LOCALNRANKS")
MVAPICH = RankVariables("MVAPICH2", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_SIZE",
                        "MV2_COMM_WORLD_LOCAL_SIZE")
SPELLING = Spelling(
    no_value=frozenset({"--allow-run-as-root", "-allow-run-as-root", "--oversubscribe", "-oversubscribe",
                        "--tag-output", "-tag-output", "--report-bindings", "-report-bindings", "--verbose", "-v",
                        "--display-map", "-display-map", "-genvall", "-envall", "-l", "-prepend-rank"}),
    two_values=frozenset({"--mca", "-mca", "-gmca", "--gmca", "-genv", "-env"}),
    aliases={"-n": "-np", "--np": "-np", "-N": "-npernode", "--npernode": "-npernode", "-ppn": "-npernode"})


def read_world(layer: Layer, scope: Scope) -> WorldReading:
    size = number(layer.get("-np"))
    return WorldReading(size, number(layer.get("-npernode")), None,
                        f"mpirun -np {size}" if size else "mpirun: -np unknown", layer.get("-np") or layer.name,
                        spawns=False)


def carries(layer: Layer, names: list[str]) -> list[str]:
    """Open MPI hands remote ranks only the variables `-x` names (MPICH's Hydra hands over the whole
    environment): which MPI this is, `mpirun --version` says."""
    try:
        done = subprocess.run([layer.name.text, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []  # it will not start either: the launch says why
    text = done.stdout + done.stderr
    if any(mark in text for mark in ("Open MPI", "OpenRTE", "PRRTE")):
        return [word for name in names for word in ("-x", name)]
    return []


MPIRUN = Launcher("mpirun", "mpirun", executables=("mpirun", "mpiexec", "mpiexec.hydra"), spelling=SPELLING,
                  read_world=read_world, ranks=(OPEN_MPI, HYDRA, MVAPICH), writing=WorldWriting(total="-np"),
                  carries=carries)
