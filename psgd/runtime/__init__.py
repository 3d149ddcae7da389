"""What every psgd process does on start: role context, event log, devices, run token."""
