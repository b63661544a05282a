"""The folder guard launch puts on the ranks' PYTHONPATH: its sitecustomize.py is the start-up hook."""
