# jobguard %postun ($1: 0 on erase, 1 or more on upgrade). The state in /var/lib/jobguard
# is kept, as rpm packages do.
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || :
	journalctl --update-catalog >/dev/null 2>&1 || :
fi
