# jobguard %preun ($1: 0 on erase, 1 or more on upgrade).
if [ "$1" -eq 0 ]; then
	if [ -d /run/systemd/system ]; then
		systemctl stop jobguard-recover.path 'jobguard@*.timer' jobguard-recover.timer jobguard-recover.service >/dev/null 2>&1 || :
	fi
	systemctl disable jobguard-recover.timer >/dev/null 2>&1 || :
fi
