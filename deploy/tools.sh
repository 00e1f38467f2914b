#!/usr/bin/env bash
# Tools the deploy/ tests use, installed when missing (idempotent, quiet when present):
#   kubectl  (`kubectl kustomize`; Debian's kubernetes-client)   -> deploy/k8s tests; Debian's
#            kubectl 1.20 also as /opt/spattn-tools/bin/kubectl-debian (kustomize v2 check)
#   promtool (from Debian's prometheus package, extracted with dpkg -x, the service is never
#            installed or started) -> /opt/spattn-tools/bin/promtool   -> deploy/monitoring tests
#   python3-yaml                                                       -> both
# A tool that cannot be had leaves its tests skipped, not failed.
set -uo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! /usr/bin/python3 -c "import yaml" 2>/dev/null; then
  $SUDO apt-get install -y -q --no-install-recommends python3-yaml >/dev/null 2>&1 ||
    echo "tools: python3-yaml unavailable"
fi
if ! command -v kubectl >/dev/null 2>&1; then
  $SUDO apt-get install -y -q --no-install-recommends kubernetes-client >/dev/null 2>&1 ||
    echo "tools: kubectl unavailable (deploy/k8s tests will be skipped)"
fi
# Debian's own kubectl (1.20, kustomize v2) next to whatever kubectl PATH has: the k8s test
# renders with both.
if [ ! -x /opt/spattn-tools/bin/kubectl-debian ]; then
  tmp=$(mktemp -d)
  if (cd "$tmp" && apt-get download kubernetes-client >/dev/null 2>&1) &&
     dpkg -x "$tmp"/kubernetes-client_*.deb "$tmp/x" &&
     $SUDO mkdir -p /opt/spattn-tools/bin &&
     $SUDO cp "$tmp/x/usr/bin/kubectl" /opt/spattn-tools/bin/kubectl-debian; then
    :
  else
    echo "tools: Debian's kubectl unavailable (its k8s render check will be skipped)"
  fi
  rm -rf "$tmp"
fi
if ! command -v promtool >/dev/null 2>&1 && [ ! -x /opt/spattn-tools/bin/promtool ]; then
  tmp=$(mktemp -d)
  if (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1) &&
     dpkg -x "$tmp"/prometheus_*.deb "$tmp/x" &&
     $SUDO mkdir -p /opt/spattn-tools/bin &&
     $SUDO cp "$tmp/x/usr/bin/promtool" /opt/spattn-tools/bin/promtool; then
    :
  else
    echo "tools: promtool unavailable (deploy/monitoring promtool tests will be skipped)"
  fi
  rm -rf "$tmp"
fi
exit 0
