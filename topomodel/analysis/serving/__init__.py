"""Serving: one decode step of one replica on the fabric, and its assumptions."""
