"""The GRBL 1.1 peer's parts; tests/peers/grbl_controller.py runs it (options and behaviour are
described there): serial_port.py the receive ring, line buffer and XON/XOFF (GRBL's serial.c),
firmware.py what the bytes and lines mean (real-time commands, '$' commands, jogs, alarms,
faults, status reports), motion.py the G-code parser, planner and execution clock."""
