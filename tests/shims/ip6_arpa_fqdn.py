"""Test shim: a Mac whose socket.getfqdn() answers an ip6.arpa name (python/cpython#79345):
torchrun then cannot resolve its own address (pytorch/pytorch PR #174513) and starts no worker,
unless it is given --local-addr. Named in TEST_SHIMS (see sitecustomize.py)."""

import socket

socket.getfqdn = lambda name="": ("1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0."
                                  "0.0.ip6.arpa")
