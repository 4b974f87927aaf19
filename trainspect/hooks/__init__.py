"""Framework hooks, the system monitor, framework timers and zero-script-change patching."""
