"""Seeing a reach system run: the observer (a live web page the gateway serves), and what
Grafana and Prometheus need to chart and alert on reach's metrics.

A feature folder: it builds on the ports (registry, supervisors, trace store, dead letters, A2A
tasks) and imports no other feature; the gateway mounts its routes.
"""
