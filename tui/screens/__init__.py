"""Cockpit screens and dialogs."""
