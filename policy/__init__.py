"""CrossGuard policy pack: rules live in policy.rules so tests can call them directly."""
