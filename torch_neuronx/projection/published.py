"""AWS's published Trainium results (``published_results.json``), the calibration set, and the
per-row work the fit runs on (``published_work.json``: traced once, so a fit never re-traces)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..runtime.errors import DataFileError
from .job import CommWork, GraphWork, TrainingWork
from .serving import EncoderWork, InferenceWork

RESULTS_FILE = Path(__file__).with_name("published_results.json")
WORK_FILE = Path(__file__).with_name("published_work.json")


@dataclasses.dataclass(frozen=True)
class PublishedRow:
    id: str
    kind: str  # training | inference (a decoder) | encoder
    model: str  # a bundled plan config
    instance: str
    instances: int
    layout: dict
    published: dict
    source: str
    sdk: str

    def targets(self) -> dict[str, float]:
        """The published figures as seconds the projection predicts: one global batch (training),
        time to first token and per output token (inference)."""
        if self.kind == "training":
            return {"step_seconds": self.layout["global_batch"] / self.published["sequences_per_second"]}
        return {k: v for k, v in self.published.items() if k in ("ttft_seconds", "tpot_seconds", "latency_seconds")}


def published_rows() -> list[PublishedRow]:
    data = json.loads(RESULTS_FILE.read_text(encoding="utf-8"))
    fields = {f.name for f in dataclasses.fields(PublishedRow)}
    return [PublishedRow(**{k: v for k, v in row.items() if k in fields}) for row in data["rows"]]


KINDS = {"training": TrainingWork, "inference": InferenceWork, "encoder": EncoderWork}


def _work_from_dict(d: dict) -> TrainingWork | InferenceWork | EncoderWork:
    cls = KINDS[d.pop("kind")]
    built = {}
    for f in dataclasses.fields(cls):
        v = d[f.name]
        if isinstance(v, dict) and "io_bytes" in v:
            v = GraphWork(**v)
        elif isinstance(v, dict) and "steps" in v:
            v = CommWork(**v)
        built[f.name] = v
    return cls(**built)


def save_work(works: dict[str, TrainingWork | InferenceWork | EncoderWork], path: Path = WORK_FILE) -> None:
    kind_of = {cls: kind for kind, cls in KINDS.items()}
    data = {row: {"kind": kind_of[type(w)], **dataclasses.asdict(w)} for row, w in works.items()}
    path.write_text(json.dumps({"schema": 1, "about": "one rank's work per published row, traced by "
                                "`torchneuron plan --validate --retrace`", "rows": data}, indent=1) + "\n",
                    encoding="utf-8")


def load_work(path: Path = WORK_FILE) -> dict[str, TrainingWork | InferenceWork | EncoderWork]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))["rows"]
    except (OSError, json.JSONDecodeError, KeyError) as exc:
        raise DataFileError(f"cannot read the traced work of the published rows {path}: {exc}; "
                            "run `torchneuron plan --validate --retrace`") from None
    return {row: _work_from_dict(dict(d)) for row, d in data.items()}
