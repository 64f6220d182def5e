"""Pulumi programs: one ComponentResource per cloud. Never imports validation."""
