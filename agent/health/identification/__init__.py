"""Verdicts on the identification indicators (friction, stiffness, torque-prediction NMSE):
baseline.py what each is judged against, indicator.py the verdict on one indicator, joint.py
the verdict on a joint (the worst of its indicators)."""
