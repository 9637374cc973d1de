# jobguard %post ($1: 1 on install, 2 or more on upgrade).
if [ "$1" -eq 1 ]; then
	# Enable the recovery timer (links only; works without a running systemd).
	systemctl enable jobguard-recover.timer >/dev/null 2>&1 || :
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || :
	systemd-tmpfiles --create jobguard.conf >/dev/null 2>&1 || :
	journalctl --update-catalog >/dev/null 2>&1 || :
	# A daemon-reload loads timers but does not start them; the recovery timer starts
	# the timers of jobs added later, so start it now rather than at the next boot.
	if [ "$1" -eq 1 ]; then
		systemctl start jobguard-recover.timer >/dev/null 2>&1 || :
	fi
	# The generator enables jobguard-recover.path (a recover pass after every
	# daemon-reload) from the next boot on; start it now.
	systemctl start jobguard-recover.path >/dev/null 2>&1 || :
fi
