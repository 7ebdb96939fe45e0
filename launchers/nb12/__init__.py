"""What notebook 12's launchers alone import from beside them: the small GPT they split
(tiny_gpt), the runs around each split (layout_runs), the layout launchers' command lines
(layout_mains) and how the Megatron MLP check words its verdict (megatron_mlp_check), as
`from nb12 import tiny_gpt`. The memory calculator it shares with other notebooks lives in
launchers/common/.
"""
