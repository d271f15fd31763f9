"""LiteLLM's proxy as a measured baseline (target: ">= 15x LiteLLM", a ratio in one run).

LiteLLM is not a dependency of this project: its proxy extra brings about
740 MB and pins of its own, so it belongs in a virtualenv of its own:

    python3 -m venv .litellm && .litellm/bin/pip install 'litellm[proxy]'
    python -m bench --litellm .litellm/bin/litellm

It runs as its users run it in front of one OpenAI-compatible upstream:
one worker, a master key (it refuses to start without one), no database,
logging at ERROR, and the model cost map read from the package instead of
fetched (this machine has no network beyond loopback and package indexes).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .procs import Fleet, Server

MASTER_KEY = "sk-bench"  # what the bench's load generator sends (bench.load.HEADERS)
ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOG": "ERROR",
    "LITELLM_TELEMETRY": "False",
}
HEALTH = "/health/liveliness"


def find(given: Path | None) -> Path | None:
    """The `litellm` executable to run: the one given, else one on PATH, else none."""
    if given is not None:
        if not given.is_file():
            raise SystemExit(f"--litellm {given}: no such file")
        return given
    found = shutil.which("litellm")
    return Path(found) if found else None


def config(workdir: Path, upstream: str) -> Path:
    """Every model name routed to the mock upstream as an OpenAI-compatible provider."""
    path = workdir / "litellm.yaml"
    path.write_text(
        f"""model_list:
  - model_name: "*"
    litellm_params:
      model: "openai/*"
      api_base: "{upstream}/v1"
      api_key: "sk-upstream"
litellm_settings:
  telemetry: false
general_settings:
  master_key: "{MASTER_KEY}"
"""
    )
    return path


def start(f: Fleet, executable: Path, port: int, upstream: str) -> Server:
    args = [
        "--config",
        str(config(f.workdir, upstream)),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]
    return f.start(
        "litellm", args, port=port, env=ENV, health=HEALTH, executable=str(executable), timeout=120
    )
