"""Reading a training log: TensorFlow's start-up chatter folded, the lines that say why a job failed picked out
(issue 16 #6, #7). Lines as TensorFlow 2.21 and Python print them."""

from tui.logtext import Folder, explain, fold

BANNER = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "E0000 00:00:1763913600.123456   4242 cuda_dnn.cc:8310] Unable to register cuDNN factory: Attempting to register"
    " factory for plugin cuDNN when one has already been registered",
    "I0000 00:00:1763913600.223456   4242 cpu_feature_guard.cc:210] This TensorFlow binary is optimized to use"
    " available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with the"
    " appropriate compiler flags.",
    "2026-11-23 16:08:14.765432: I tensorflow/core/util/port.cc:153] oneDNN custom operations are on. You may see"
    " slightly different numerical results due to floating-point round-off errors from different computation orders.",
]


def test_the_start_up_banner_folds_into_one_line_and_the_job_s_own_lines_stay():
    lines = ["epoch 1", *BANNER, "step 1 loss 2.3", "I said: E0000 is not a log line of mine"]
    assert fold(lines) == ["epoch 1", "··· 5 lines of TensorFlow start-up folded ···", *lines[-2:]]
    assert fold(["a", BANNER[0], "b"]) == ["a", BANNER[0], "b"]  # one line alone is left as it is
    folder = Folder()  # the same over a log that arrives in pieces
    assert folder.feed(["epoch 1", *BANNER[:2]]) == ["epoch 1"]
    assert folder.feed([*BANNER[2:], "step 1"]) == ["··· 5 lines of TensorFlow start-up folded ···", "step 1"]
    assert folder.feed(BANNER[:1]) == [] and folder.flush() == BANNER[:1]


def test_why_a_job_failed_is_its_exception_not_the_banner_or_the_last_lines():
    tail = [
        *BANNER,
        "Traceback (most recent call last):",
        '  File "/src/train.py", line 40, in <module>',
        "    main()",
        '  File "/src/train.py", line 12, in main',
        "    x = load(args.data)",
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/cifar'",
        "gpudeck: the command exited with status 1",
    ]
    assert explain(tail) == [
        '  File "/src/train.py", line 12, in main',
        "    x = load(args.data)",
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/cifar'",
    ]
    cut = tail[-4:]  # a 20-line tail that lost the head of a long traceback
    assert explain(cut)[-1].startswith("FileNotFoundError")
    timeout = [*BANNER, "train step 10 loss 0.5", "stopped at step 12; checkpoint saved", "train step 11 loss 0.4"]
    assert explain(timeout) == ["stopped at step 12; checkpoint saved"]
    assert explain(["[worker1] " + line for line in tail])[-1].startswith("[worker1] FileNotFoundError")
    assert explain([*BANNER, "a", "b"]) == ["a", "b"]
