"""The UR driver's worker process: ur_rtde's C++ clients, away from the daemon.

server.py reads the driver's requests (`python -m drivers.ur_rtde.worker` runs it), cycle.py and
servo.py move the arm on the cycle thread, stream.py merges the RTDE receive paths. The worker
stops the arm itself (`_send_stop` in cycle.py) on a stop request, a fault, a silent agent or EOF.
It imports nothing of the agent and only drivers.ur_rtde.wire of the driver.
"""
