#!/usr/bin/env python3
"""Counts gtest cases of one `bazel test` run from its build-event file and test.xml files.

Prints the failing cases and the last line `N passed, M failed, K skipped`; exits 1 on failures.
A test target with no result (failed to build) counts as one failed case.
"""
import json
import sys
import urllib.parse
import xml.etree.ElementTree as ET


def main():
    # count_tests.py BEP [TESTLOGS] [--bep MORE_BEP]... [--extra FILE]...
    # --extra: lines "PASS name" / "FAIL name" / "SKIP name" from steps outside `bazel test`
    # (the bounded fuzz run).
    beps, extras = [sys.argv[1]], []
    args = sys.argv[2:]
    for i, a in enumerate(args):
        if a == "--bep" and i + 1 < len(args):
            beps.append(args[i + 1])
        if a == "--extra" and i + 1 < len(args):
            extras.append(args[i + 1])
    passed = failed = skipped = 0
    for bep_path in beps:
        p, f, s = count_bep(bep_path)
        passed, failed, skipped = passed + p, failed + f, skipped + s
    for extra in extras:
        try:
            lines = open(extra).read().splitlines()
        except OSError as e:
            print(f"UNREADABLE RESULT: {extra}: {e}")
            failed += 1
            continue
        for line in lines:
            kind, _, name = line.partition(" ")
            if kind == "PASS":
                passed += 1
            elif kind == "SKIP":
                skipped += 1
            elif kind == "FAIL":
                print(f"FAILED: {name}")
                failed += 1
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


def count_bep(bep_path):
    targets = set()  # test targets the run configured
    results = {}     # label -> list of test.xml paths
    with open(bep_path) as f:
        for line in f:
            ev = json.loads(line)
            eid = ev.get("id", {})
            if "targetCompleted" in eid:
                label = eid["targetCompleted"]["label"]
                kind = ev.get("configured", {}).get("targetKind", "")
                if "test" in kind or ev.get("completed", {}).get("testTimeoutSeconds"):
                    targets.add(label)
            if "targetConfigured" in eid:
                kind = ev.get("configured", {}).get("targetKind", "")
                if kind.endswith("_test rule"):
                    targets.add(eid["targetConfigured"]["label"])
            if "testResult" in eid:
                label = eid["testResult"]["label"]
                for out in ev.get("testResult", {}).get("testActionOutput", []):
                    if out.get("name") == "test.xml":
                        uri = out["uri"]
                        results.setdefault(label, []).append(
                            urllib.parse.unquote(uri[len("file://"):]))
    passed = failed = skipped = 0
    for label in sorted(targets):
        if label not in results:
            print(f"FAILED TO BUILD OR RUN: {label}")
            failed += 1
            continue
        for xml_path in results[label]:
            try:
                root = ET.parse(xml_path).getroot()
            except (OSError, ET.ParseError) as e:
                print(f"UNREADABLE RESULT: {label}: {e}")
                failed += 1
                continue
            cases = list(root.iter("testcase"))
            if not cases:  # a test binary that is not gtest: one case per target
                bad = root.get("failures", "0") != "0" or root.get("errors", "0") != "0"
                failed += bad
                passed += not bad
                continue
            for case in cases:
                name = f"{label} {case.get('classname')}.{case.get('name')}"
                if case.find("failure") is not None or case.find("error") is not None:
                    print(f"FAILED: {name}")
                    failed += 1
                elif case.get("result") == "skipped" or case.find("skipped") is not None:
                    skipped += 1
                else:
                    passed += 1
    return passed, failed, skipped


if __name__ == "__main__":
    sys.exit(main())
