#!/usr/bin/env python3
"""Runs unittest modules and writes a JUnit XML file (Bazel's $XML_OUTPUT_FILE) with one
<testcase> per test, so deploy/count_tests.py counts Python cases like gtest cases.

    junit_runner.py [--xml=FILE] path/to/test_a.py [path/to/test_b.py ...]
Exit status 1 when any test failed or errored.
"""
import importlib.util
import os
import sys
import time
import unittest
import xml.etree.ElementTree as ET


class _Result(unittest.TextTestResult):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.cases = []  # (test, outcome, text, seconds)
        self._t0 = 0.0

    def startTest(self, test):
        self._t0 = time.monotonic()
        super().startTest(test)

    def _add(self, test, outcome, text=""):
        self.cases.append((test, outcome, text, time.monotonic() - self._t0))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._add(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._add(test, "failure", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._add(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._add(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._add(test, "pass")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._add(test, "failure", "unexpected success")


def main(argv):
    xml_path = os.environ.get("XML_OUTPUT_FILE", "")
    paths = []
    for a in argv:
        if a.startswith("--xml="):
            xml_path = a[len("--xml="):]
        else:
            paths.append(a)
    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for p in paths:
        name = os.path.splitext(os.path.basename(p))[0]
        spec = importlib.util.spec_from_file_location(name, p)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        suite.addTests(loader.loadTestsFromModule(mod))
    runner = unittest.TextTestRunner(resultclass=_Result, verbosity=2, stream=sys.stdout)
    result = runner.run(suite)
    # Errors outside any test (setUpModule/setUpClass) show up as _ErrorHolder entries.
    root = ET.Element("testsuites")
    ts = ET.SubElement(root, "testsuite", name="python", tests=str(len(result.cases)))
    for test, outcome, text, secs in result.cases:
        tid = test.id()
        cls, _, meth = tid.rpartition(".")
        tc = ET.SubElement(ts, "testcase", classname=cls or tid, name=meth or tid,
                           time=f"{secs:.3f}")
        if outcome in ("failure", "error"):
            ET.SubElement(tc, outcome, message=text.splitlines()[-1] if text else "").text = text
        elif outcome == "skipped":
            ET.SubElement(tc, "skipped", message=text)
    if xml_path:
        ET.ElementTree(root).write(xml_path, encoding="utf-8", xml_declaration=True)
    bad = not result.wasSuccessful() or not result.cases
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
