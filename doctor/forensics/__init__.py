"""Hang forensics: a hung rank's stacks and collective record taken before the kill, and what they show."""
