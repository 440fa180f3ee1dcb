"""`isaacd status --json`'s layout (daemon/cli/json_out.py): the same JSON document, one job per line."""

from __future__ import annotations

import json

from isaacd.cli.json_out import one_element_per_line


def test_the_text_reads_back_as_the_same_document_with_one_job_per_line():
    doc = {"jobs": [{"name": f"job-{i}", "state": "queued", "queue": {"position": i, "reason": "a \"quoted\"\nline"}}
                    for i in range(3)],
           "gpus": {"gpus": [{"index": 0}]}, "sweeps": [], "supervisor": {"pid": 7, "version": "0.1"}}
    text = one_element_per_line(doc)
    assert json.loads(text) == doc
    job_lines = [line for line in text.splitlines() if '"name": "job-' in line]
    assert len(job_lines) == 3 and all(line.startswith('    {"name": "job-') for line in job_lines)
    assert '"sweeps": []' in text  # an empty list stays on its key's line


def test_values_json_cannot_encode_are_written_as_text_as_before():
    from pathlib import Path
    assert json.loads(one_element_per_line({"jobs": [{"log": Path("/var/log/x")}]})) == {"jobs": [{"log": "/var/log/x"}]}
