"""trajforge's environments, real or simulated, served to RL trainers over OpenEnv's
protocol (``serve.app``), every served step recorded (``serve.session``); adapters that
trainers take as they are (``serve.trl``)."""
