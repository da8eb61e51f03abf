"""The Chinese of the checkers' hints and checks (English text -> Chinese), for the
book's Chinese edition. Hand-written; ``tests/test_exercises.py`` fails when a hint, a
check or a fixed message of a checker in this package has no entry here, or an entry no
checker prints."""
from __future__ import annotations

MESSAGES: dict[str, str] = {
    # ch00.py:31-44, the checks of choose_device (_device_checks)
    "nothing asked for on a CUDA machine: 'cuda'":
        "什么都不指定，在有 CUDA 的机器上：'cuda'",
    "nothing asked for on a Mac: 'mps'":
        "什么都不指定，在 Mac 上：'mps'",
    "nothing asked for, CPU only: 'cpu'":
        "什么都不指定，只有 CPU：'cpu'",
    ("LLMCORE_DEVICE=cpu on a CUDA machine: 'cpu' (the variable overrides the "
     "fastest device)"):
        "在有 CUDA 的机器上设 LLMCORE_DEVICE=cpu：'cpu'（环境变量优先于最快的设备）",
    ("preferred='cuda' with LLMCORE_DEVICE=cpu: 'cuda' (the argument beats the "
     "variable)"):
        "preferred='cuda' 且 LLMCORE_DEVICE=cpu：'cuda'（参数优先于环境变量）",
    "LLMCORE_DEVICE=cuda:1 on a CUDA machine: 'cuda:1' (the index is kept)":
        "在有 CUDA 的机器上设 LLMCORE_DEVICE=cuda:1：'cuda:1'（保留设备编号）",
    "LLMCORE_DEVICE=tpu must raise ValueError: not a device llmcore supports":
        "LLMCORE_DEVICE=tpu 必须抛出 ValueError：llmcore 不支持这种设备",
    ("LLMCORE_DEVICE=cuda on a CPU-only machine must raise RuntimeError, not fall "
     "back to the CPU"):
        ("在只有 CPU 的机器上设 LLMCORE_DEVICE=cuda 必须抛出 RuntimeError，"
         "不能退回到 CPU"),
    "preferred='mps' on a CUDA machine must raise RuntimeError":
        "在有 CUDA 的机器上 preferred='mps' 必须抛出 RuntimeError",
    # ch00.py:74
    "softmax([0, 0]) must be [0.5, 0.5]":
        "softmax([0, 0]) 必须等于 [0.5, 0.5]",
    # ch00.py:75
    "softmax([1, 2, 3]) must match torch.softmax":
        "softmax([1, 2, 3]) 必须与 torch.softmax 的结果一致",
    # ch00.py:77
    ("softmax([1000, 1001, 1002]) must be finite and equal softmax([0, 1, 2]): "
     "subtract the maximum before exp()"):
        ("softmax([1000, 1001, 1002]) 必须是有限值，且等于 softmax([0, 1, 2])："
         "先减去最大值再做 exp()"),
    # ch00.py:80
    "a 2-D input must be normalized along its last dimension":
        "二维输入必须沿最后一维归一化",
    # ch00.py:82
    "the input tensor must not be modified in place":
        "不得原地修改输入张量",
    # ch00.py:122
    "the same seed must give the same list":
        "相同的种子必须给出相同的列表",
    # ch00.py:123
    "draws must not depend on torch's global generator (use a torch.Generator)":
        "抽样结果不得依赖 torch 的全局随机数生成器（请使用 torch.Generator）",
    # ch00.py:125
    "the function must not change torch's global generator state":
        "函数不得改变 torch 全局随机数生成器的状态",
    # ch00.py:127
    "different seeds should give different draws":
        "不同的种子应当给出不同的抽样结果",
    # ch00.py:128
    "frequencies of 4,000 draws must follow probs within 0.04":
        "4,000 次抽样的频率必须符合 probs，误差在 0.04 以内",
    # ch00.py:129
    "draws must be Python ints in range(len(probs))":
        "抽样结果必须是 range(len(probs)) 中的 Python int",
    # ch01.py:36
    ("TTFT = first token time - start; TPOT = (last - first) / "
     "(number of tokens - 1): n tokens have n - 1 gaps, and the first token's wait "
     "is TTFT, not a gap. With one token there is no TPOT (None)."):
        ("TTFT = 第一个词元的时间 - start；TPOT = (last - first) / (词元数 - 1)："
         "n 个词元之间有 n - 1 个间隔，而第一个词元的等待时间是 TTFT，不算间隔。"
         "只有一个词元时没有 TPOT（None）。"),
    # ch01.py:117
    ("4 new tokens after the prompt [3, 1, 4, 1, 5] must be a list of 4 ints, the "
     "argmax of each step's logits"):
        ("提示词 [3, 1, 4, 1, 5] 之后的 4 个新词元必须是由 4 个 int 组成的列表，"
         "依次是每一步 logits 的 argmax"),
    # ch01.py:119
    "the first call must be the prefill: the whole prompt at positions 0..4":
        "第一次调用必须是预填充：整个提示词，位置为 0..4",
    # ch01.py:121
    ("each later call must feed one token, the one just chosen, at the next position "
     "(5, 6, ...)"):
        "之后的每次调用必须在下一个位置（5, 6, ...）送入一个词元，即刚刚选出的那个",
    # ch01.py:123
    ("4 new tokens take 4 calls: the prefill gives the first, and the last token is "
     "never fed back"):
        "4 个新词元需要 4 次调用：预填充给出第一个，而最后一个词元永远不会再送回模型",
    # ch01.py:125
    "1 new token takes the prefill alone":
        "1 个新词元只需预填充这一次调用",
    # ch01.py:126
    "12 new tokens must match too":
        "12 个新词元也必须一致",
    # ch01.py:148
    ("the prompt is processed once by prefill, which already yields the first new "
     "token; each later token needs the previous one fed back. The last token "
     "sampled is never fed to the model. Without a cache, the step that makes token "
     "t (from 0) runs prompt_len + t positions."):
        ("提示词由预填充处理一次，预填充已经产出第一个新词元；"
         "之后的每个词元都需要把前一个词元送回模型。"
         "最后采样出的词元永远不会送入模型。没有缓存时，"
         "生成第 t 个词元（从 0 开始计）的那一步要处理 prompt_len + t 个位置。"),
    # ch02.py:27
    ("count (ids[i], ids[i+1]) for every i inside each chunk, in order (a, b); the "
     "last id of one chunk and the first of the next are not a pair."):
        ("在每个块内部，对每个 i 统计 (ids[i], ids[i+1])，顺序为 (a, b)；"
         "一个块的最后一个 id 与下一个块的第一个 id 不构成一对。"),
    # ch02.py:44
    "merge([1, 2, 3, 1, 2], (1, 2), 9) must give [9, 3, 9]":
        "merge([1, 2, 3, 1, 2], (1, 2), 9) 必须得到 [9, 3, 9]",
    # ch02.py:46
    ("merge([1, 1, 1], (1, 1), 9) must give [9, 1]: occurrences do not overlap, and "
     "the scan goes left to right"):
        "merge([1, 1, 1], (1, 1), 9) 必须得到 [9, 1]：各处匹配互不重叠，且从左往右扫描",
    # ch02.py:48
    "merge([1, 1, 1, 1], (1, 1), 9) must give [9, 9]":
        "merge([1, 1, 1, 1], (1, 1), 9) 必须得到 [9, 9]",
    # ch02.py:50
    ("the order inside the pair matters: merge([2, 1, 2, 1], (1, 2), 7) must give "
     "[2, 7, 1]"):
        "一对之内的顺序很重要：merge([2, 1, 2, 1], (1, 2), 7) 必须得到 [2, 7, 1]",
    # ch02.py:52
    ("ids without the pair come back unchanged, the last id included: "
     "merge([3, 4, 1], (1, 2), 9) must give [3, 4, 1]"):
        ("不含这一对的 ids 原样返回，最后一个 id 也不例外："
         "merge([3, 4, 1], (1, 2), 9) 必须得到 [3, 4, 1]"),
    # ch02.py:55
    ("ids must be compared as whole numbers, not digits of a string: "
     "merge([11, 2, 1, 12], (1, 2), 9) must give [11, 2, 1, 12]"):
        ("id 必须作为完整的整数来比较，而不是当作字符串里的数字："
         "merge([11, 2, 1, 12], (1, 2), 9) 必须得到 [11, 2, 1, 12]"),
    # ch02.py:58
    "an empty list gives an empty list":
        "空列表得到空列表",
    # ch02.py:59
    "the input list must not be modified (return a new list)":
        "不得修改输入列表（返回一个新列表）",
    # ch02.py:103
    ("sum the token counts of all Chinese sentences and of all English sentences, "
     "then divide (Chinese / English); count tokens with tokenizer.encode, not "
     "characters or bytes, and do not average per-pair ratios."):
        ("分别累加所有中文句子和所有英文句子的词元数，再相除（中文 / 英文）；"
         "用 tokenizer.encode 计算词元数，不要数字符或字节，"
         "也不要对每一对句子的比值取平均。"),
    # ch02.py:126
    ("keep the bytes of an unfinished character at the end of the buffer for the "
     "next step, and decode everything before them now: never emit U+FFFD, never "
     "drop bytes, never wait longer than needed."):
        ("把缓冲区末尾未完整字符的字节留到下一步，它们之前的一切现在就解码："
         "绝不输出 U+FFFD，绝不丢弃字节，也绝不多等。"),
    # ch03.py:49
    ("ids [2, 0, 2, 5] into a (10, 4) table must give rows 2, 0, 2, 5 exactly, shape "
     "(4, 4); the one-hot width is the vocabulary size table.shape[0], not ids.max() "
     "+ 1"):
        ("用 ids [2, 0, 2, 5] 查 (10, 4) 的表，必须精确得到第 2、0、2、5 行，"
         "形状为 (4, 4)；独热向量的宽度是词表大小 table.shape[0]，"
         "而不是 ids.max() + 1"),
    # ch03.py:52
    "a (2, 3) batch of ids must give shape (2, 3, 4), rows of the table exactly":
        ("形状为 (2, 3) 的一批 ids 必须得到形状 (2, 3, 4)，"
         "且每一行与表中对应的行完全相同"),
    # ch03.py:54
    ("a bfloat16 table must give a bfloat16 result equal to table[ids] "
     "(cast the one-hot matrix to table.dtype before the matmul)"):
        ("bfloat16 的表必须给出等于 table[ids] 的 bfloat16 结果（做矩阵乘法之前，"
         "先把独热矩阵转换为 table.dtype）"),
    # ch03.py:86
    ("counter-clockwise by `angle` radians: x' = x cos - y sin, y' = x sin + y cos; "
     "(1, 0) turned by pi/2 is (0, 1)."):
        ("逆时针旋转 `angle` 弧度：x' = x cos - y sin，y' = x sin + y cos；"
         "(1, 0) 转过 pi/2 得到 (0, 1)。"),
    # ch03.py:110
    ("the result must be a tensor of shape (len(positions), head_dim // 2): one "
     "angle per pair, not the doubled cos/sin layout"):
        ("结果必须是形状为 (len(positions), head_dim // 2) 的张量：每对坐标一个角度，"
         "而不是 cos/sin 表那种重复两遍的排布"),
    # ch03.py:112
    ("position 1 with head_dim 8 and theta 10000 must give [1, 0.1, 0.01, 0.001]: "
     "pair i turns by theta**(-2*i/head_dim) radians per position, so pair 0 turns "
     "by exactly 1 radian"):
        ("head_dim 为 8、theta 为 10000 时，位置 1 必须得到 [1, 0.1, 0.01, 0.001]："
         "第 i 对坐标每个位置转过 theta**(-2*i/head_dim) 弧度，"
         "所以第 0 对恰好转过 1 弧度"),
    # ch03.py:115
    ("position 0 must give all zeros, and angles must grow in proportion to the "
     "position"):
        "位置 0 必须得到全零，且角度必须与位置成正比地增长",
    # ch03.py:117
    "head_dim 4, theta 100, positions [3, 7] must match":
        "head_dim 为 4、theta 为 100、positions 为 [3, 7] 时，结果必须一致",
    # ch03.py:119
    "head_dim 16, theta 500000, positions 0..5 must match":
        "head_dim 为 16、theta 为 500000、positions 为 0..5 时，结果必须一致",
    # ch03.py:153
    ("with weight 1 and eps 0, rows [3, -4, 0, 0] and [1, 1, 1, 1] must become "
     "[1.2, -1.6, 0, 0] and [1, 1, 1, 1]: divide each row by the square root of the "
     "mean of its squares"):
        ("weight 为 1、eps 为 0 时，行 [3, -4, 0, 0] 和 [1, 1, 1, 1] 必须变成 "
         "[1.2, -1.6, 0, 0] 和 [1, 1, 1, 1]：每一行除以其元素平方的均值的平方根"),
    # ch03.py:156
    ("inputs with a large mean must keep it (RMSNorm does not subtract the mean, "
     "LayerNorm does), and the result must be multiplied by weight"):
        ("均值很大的输入必须保留这个均值（RMSNorm 不减去均值，LayerNorm 才减），"
         "并且结果必须乘以 weight"),
    # ch03.py:159
    "a (2, 3, 5) input must be normalized over its last dimension":
        "形状为 (2, 3, 5) 的输入必须在最后一维上归一化",
    # ch03.py:161
    ("eps goes inside the square root: x / sqrt(mean(x**2) + eps); check with eps = "
     "0.01 on x = 0.1"):
        ("eps 要放在平方根里面：x / sqrt(mean(x**2) + eps)；"
         "用 eps = 0.01、x = 0.1 来检验"),
    # ch04.py:52
    "the output must have the shape of q, here (1, 1, 4, 8)":
        "输出的形状必须与 q 相同，这里是 (1, 1, 4, 8)",
    # ch04.py:54
    "the first query may only see the first key, so its output must equal v[..., 0, :]":
        "第一个查询只能看到第一个键，所以它的输出必须等于 v[..., 0, :]",
    # ch04.py:56
    ("changing the last token's key and value must not change the earlier outputs "
     "(causal mask)"):
        "改变最后一个词元的键和值，不得改变前面的输出（因果掩码）",
    # ch04.py:58
    ("outputs must match softmax(q k^T / sqrt(head_dim) + causal mask) v for "
     "head_dim 16 (did you scale by 1/sqrt(head_dim) and take the softmax over the "
     "keys?)"):
        ("head_dim 为 16 时，输出必须与 softmax(q k^T / sqrt(head_dim) + 因果掩码) v "
         "一致（是否乘了 1/sqrt(head_dim) 做缩放，并沿键的维度做 softmax？）"),
    # ch04.py:61
    "outputs must match the reference for head_dim 64 and 12 tokens":
        "head_dim 为 64、共 12 个词元时，输出必须与参考实现一致",
    # ch04.py:85
    ("the result must have shape (batch, n_kv_heads * n_rep, seq, head_dim): "
     "(1, 6, 3, 4) here"):
        ("结果的形状必须是 (batch, n_kv_heads * n_rep, seq, head_dim)："
         "这里是 (1, 6, 3, 4)"),
    # ch04.py:88
    ("with 2 kv heads and n_rep=2, query heads 0, 1, 2, 3 must read kv heads 0, 0, "
     "1, 1 (copies of one kv head next to each other, not 0, 1, 0, 1)"):
        ("有 2 个 kv 头且 n_rep=2 时，查询头 0、1、2、3 必须依次读取 kv 头 "
         "0、0、1、1（同一个 kv 头的副本彼此相邻，而不是 0、1、0、1）"),
    # ch04.py:90
    "n_rep=1 must return x unchanged":
        "n_rep=1 时必须原样返回 x",
    # ch04.py:91
    "a random (2, 2, 5, 8) tensor with n_rep=4 must match the reference":
        "形状为 (2, 2, 5, 8) 的随机张量在 n_rep=4 时必须与参考实现一致",
    # ch04.py:93
    ("a random (1, 8, 3, 16) tensor with n_rep=4 (Llama-3-8B's grouping) must match "
     "the reference"):
        ("形状为 (1, 8, 3, 16) 的随机张量在 n_rep=4（Llama-3-8B 的分组方式）"
         "时必须与参考实现一致"),
    # ch04.py:127
    "lengths [2, 4] padded to 4 must give a (2, 4, 4) tensor":
        "lengths 为 [2, 4]、填充到 4 时，必须得到形状为 (2, 4, 4) 的张量",
    # ch04.py:128
    ("one prompt of 4 tokens, no padding: the lower triangle "
     "(a query sees itself and earlier keys) as a bool tensor"):
        ("一个 4 词元的提示词，没有填充：结果是下三角（每个查询看到自身和更早的键），"
         "以 bool 张量表示"),
    # ch04.py:130
    ("lengths [3, 5] padded to 5: the 2 pad tokens sit on the left of the first "
     "prompt, and no real query may see them"):
        ("lengths 为 [3, 5]、填充到 5：2 个填充词元位于第一个提示词的左侧，"
         "任何真实查询都不得看到它们"),
    # ch04.py:132
    ("a pad query would see nothing and get NaN from the softmax: its row must be "
     "all True (lengths [1, 3], total 3)"):
        ("填充位置的查询本来什么也看不到，softmax 会给出 NaN："
         "它的那一行必须全为 True（lengths 为 [1, 3]，total 为 3）"),
    # ch04.py:134
    ("sliding_window 2, lengths [4, 6], total 6: a query sees itself and the one key "
     "before it, never padding"):
        ("sliding_window 为 2、lengths 为 [4, 6]、total 为 6："
         "每个查询看到自身和它前面的一个键，绝不看到填充"),
    # ch04.py:136
    ("sliding_window 1: each real query sees only itself "
     "(the window counts the query's own token)"):
        "sliding_window 为 1：每个真实查询只看到自身（窗口把查询自己的词元也算在内）",
    # ch04.py:138
    "sliding_window 3, lengths [5, 2, 7], total 7 must match":
        "sliding_window 为 3、lengths 为 [5, 2, 7]、total 为 7 时，结果必须一致",
    # ch04.py:159
    ("q and o: dim * n_heads * head_dim each; k and v: dim * n_kv_heads * head_dim "
     "each; SwiGLU: 3 * dim * hidden_dim; two RMSNorms: dim each."):
        ("q 和 o：各 dim * n_heads * head_dim；k 和 v："
         "各 dim * n_kv_heads * head_dim；SwiGLU：3 * dim * hidden_dim；"
         "两个 RMSNorm：各 dim。"),
    # ch05.py:42
    ("count what forward_cost counts for one new token per sequence: it sees "
     "context_len + 1 keys, itself included; the weights are read once per step, but "
     "each sequence reads its own cache and writes its new token's keys and values."):
        ("按 forward_cost 的计法，统计每个序列生成一个新词元的开销："
         "新词元看到 context_len + 1 个键（包括它自己）；权重每步只读一次，"
         "但每个序列都要读取自己的缓存，并写入新词元的键和值。"),
    # ch05.py:71
    ("each sequence adds f FLOPs and k bytes of KV cache to a step that reads the "
     "weights once (W bytes): intensity(B) = B f / (W + B k) grows towards f / k. If "
     "f / k <= ridge, no batch gets there (None); else solve B f >= ridge (W + B k) "
     "for the smallest int B."):
        ("每个序列给一步增加 f FLOPs 的计算和 k 字节的 KV 缓存，"
         "而这一步只读一次权重（W 字节）：intensity(B) = B f / (W + B k) 随 B "
         "增大趋近 f / k。若 f / k <= ridge，多大的批次都达不到（None）；"
         "否则解 B f >= ridge (W + B k)，求最小的整数 B。"),
    # ch05.py:93
    ("ttft = 2 * n_params * prompt_len / peak_flops (compute-bound prefill); tpot = "
     "n_params * bytes_per_param / bandwidth (memory-bound decode)."):
        ("ttft = 2 * n_params * prompt_len / peak_flops（预填充是算力瓶颈）；"
         "tpot = n_params * bytes_per_param / bandwidth（解码是访存瓶颈）。"),
    # ch06.py:32
    ("per sequence: 2 (K and V) * layers * kv heads * head_dim * tokens * bytes; "
     "divide what the weights leave, round down to a whole int, never below 0."):
        ("每个序列：2（K 和 V）* 层数 * kv 头数 * head_dim * 词元数 * 字节数；"
         "用权重之外剩下的内存除以它，向下取整为 int，且不小于 0。"),
    # ch06.py:66
    ("prefill at positions 0..3 of a 10-slot cache must return slots 0..3 holding "
     "the new keys"):
        "在 10 个槽位的缓存中对位置 0..3 做预填充，必须返回存有新键的槽位 0..3",
    # ch06.py:68
    ("a decode step at position 6 must land in slot 6 and return slots 0..6 "
     "(not the whole cache)"):
        "位置 6 上的一个解码步必须写入槽位 6，并返回槽位 0..6（而不是整个缓存）",
    # ch06.py:70
    "positions need not be in order: [[5, 2, 3]] writes slots 5, 2, 3":
        "位置不必有序：[[5, 2, 3]] 写入槽位 5、2、3",
    # ch06.py:72
    ("each batch row has its own positions: [[2], [4]] writes row 0 at slot 2, row 1 "
     "at slot 4"):
        "批次的每一行有自己的位置：[[2], [4]] 把第 0 行写入槽位 2，第 1 行写入槽位 4",
    # ch06.py:74
    "the cache tensor itself must be updated (write in place, no copy)":
        "必须更新缓存张量本身（原地写入，不要复制）",
    # ch06.py:110
    "an empty index reuses nothing":
        "空索引什么也复用不了",
    # ch06.py:111
    "the same 14-token prompt again reuses its 3 full blocks: 12 tokens":
        "再次遇到同一个 14 词元的提示词，复用它的 3 个完整块：12 个词元",
    # ch06.py:113
    "a prompt sharing 2 blocks, then differing, reuses 8 tokens":
        "前 2 个块相同、之后不同的提示词，复用 8 个词元",
    # ch06.py:115
    ("equal blocks after a different first block are not reusable "
     "(chain the hash over the parent)"):
        "第一个块不同时，其后即使有相同的块也不能复用（哈希要沿父块链式计算）",
    # ch06.py:117
    ("a 12-token prompt cached whole reuses 8 tokens: its last token must always be "
     "recomputed"):
        "整个都已缓存的 12 词元提示词只能复用 8 个词元：它的最后一个词元总要重新计算",
    # ch06.py:119
    "a key whose stored tokens differ from the prompt's (a hash collision) is a miss":
        "若某个键下存储的词元与提示词中的不同（哈希冲突），算作未命中",
    # ch07.py:49
    ("divide by the temperature before the softmax; keep a token while the tokens "
     "ranked above it hold less than top_p (the one that crosses top_p stays), and "
     "keep every token as likely as the least likely one kept; renormalise what is "
     "kept."):
        ("softmax 之前先除以温度；若排在某个词元之前的词元概率之和小于 top_p，"
         "就保留该词元（使累计概率越过 top_p 的那个词元也保留），"
         "并保留与被保留的最不可能的词元概率相等的所有词元；"
         "对保留下来的概率重新归一化。"),
    # ch07.py:85
    ("a seen positive logit is divided: [2, -2, 4, -1, 0] with seen [0], penalty 2 "
     "-> [1, -2, 4, -1, 0]"):
        ("出现过的正 logit 要除以惩罚系数：[2, -2, 4, -1, 0]，seen 为 [0]，"
         "penalty 为 2 -> [1, -2, 4, -1, 0]"),
    # ch07.py:87
    ("a seen negative logit is multiplied (dividing would raise it): seen [1] -> "
     "[2, -4, 4, -1, 0]"):
        ("出现过的负 logit 要乘以惩罚系数（除法反而会让它变大）："
         "seen 为 [1] -> [2, -4, 4, -1, 0]"),
    # ch07.py:89
    ("unseen tokens keep their logits: seen [2, 3], penalty 1.25 -> "
     "[2, -2, 3.2, -1.25, 0]"):
        ("未出现过的词元保持原来的 logit：seen 为 [2, 3]，"
         "penalty 为 1.25 -> [2, -2, 3.2, -1.25, 0]"),
    # ch07.py:92
    ("a token seen three times is penalised once: seen [2, 2, 2], penalty 2 -> "
     "[2, -2, 2, -1, 0]"):
        ("出现三次的词元只惩罚一次：seen 为 [2, 2, 2]，"
         "penalty 为 2 -> [2, -2, 2, -1, 0]"),
    # ch07.py:94
    "nothing seen, nothing changes":
        "没有出现过任何词元时，什么都不变",
    # ch07.py:114
    ("collect the n-grams of every completion separately into one list; divide the "
     "size of its set by its length."):
        ("在每个补全内部分别取 n 元组，全部收集到同一个列表里；"
         "用它去重后的集合大小除以列表长度。"),
    # ch07.py (check_int_viable)
    ("the integers written as text and k more digits form one range, "
     "[t * 10**k, (t + 1) * 10**k - 1] for t = int(text), negated after a "
     "minus; text is viable if, for some k, that range meets [lo, hi]. A text "
     "starting with 0 is viable only as 0 itself, and never after a minus."):
        ("text 后再接 k 位数字所写出的整数构成一个区间："
         "[t * 10**k, (t + 1) * 10**k - 1]，其中 t = int(text)，有负号时取相反数；"
         "只要对某个 k，这个区间与 [lo, hi] 相交，text 就还可行。以 0 开头的 text 只有"
         "本身是 0 时才可行，负号之后则永远不行。"),
    # ch07.py:59
    "check of the input: the logits were modified in place.":
        "输入检查：logits 被原地修改了。",
    # ch08.py:32
    ("for every stop string s and every k from 1 to len(s) - 1, does text end with "
     "s[:k]? hold back the largest such k."):
        ("对每个停止字符串 s 和从 1 到 len(s) - 1 的每个 k，text 是否以 s[:k] 结尾？"
         "暂扣满足条件的最大的 k 个字符。"),
    # ch08.py:68
    ("take the draws in order; a stop id ends the reply ('stop', the id) only once "
     "more than min_tokens tokens have come, and it is one of the completion tokens; "
     "otherwise the max_tokens-th token ends it ('length', None). A stop id wins "
     "over max_tokens."):
        ("按顺序取出 draws；只有在已经来了超过 min_tokens 个词元之后，"
         "停止 id 才会结束回复，结果为 ('stop', 该 id)，且它本身计为一个补全词元；"
         "否则由第 max_tokens 个词元结束回复，结果为 ('length', None)。"
         "停止 id 优先于 max_tokens。"),
    # ch08.py:90
    ("prompt tokens at the input price, completion tokens at the output price, "
     "prices are per million tokens."):
        "提示词元按输入价格计费，补全词元按输出价格计费，价格以每百万词元计。",
    # ch09.py:36
    ("cut the list into consecutive groups of `batch`; each group costs its longest "
     "request (the last group may be smaller)."):
        ("把列表按顺序切成每组 `batch` 个的若干组；"
         "每组耗费的步数等于其中最长的请求（最后一组可以不满）。"),
    # ch09.py:49
    ("simulate: fill free slots from the front of the queue, advance every running "
     "request by one step, drop the finished ones, count the steps."):
        ("模拟：用队首的请求填满空闲槽位，让每个运行中的请求前进一步，"
         "移除已完成的请求，统计步数。"),
    # ch09.py:85
    ("free = num_free minus what running requests were promised but have not taken; "
     "then, from the front of the queue, admit while the batch has a slot and the "
     "request's ceil((prompt_len + max_tokens) / block_size) blocks fit; stop at the "
     "first that does not (no later request may pass it)."):
        ("free = num_free 减去运行中请求已获承诺但尚未占用的块；"
         "然后从队首开始接纳请求，条件是批次还有空位，且该请求所需的 "
         "ceil((prompt_len + max_tokens) / block_size) 个块放得下；"
         "遇到第一个不满足条件的请求就停止（后面的请求不得越过它）。"),
    # ch10.py:46
    ("absent or null means the default (0, off); -1 also means off; accept only a "
     "real int (True is an int in Python, 5.0 is not) in [0, vocab_size]; anything "
     "else raises APIError(400, message, param='top_k')."):
        ("缺省或为 null 表示默认值（0，关闭）；-1 也表示关闭；"
         "只接受 [0, vocab_size] 内真正的 int（在 Python 中 True 也是 int，"
         "5.0 则不是）；其他任何值都抛出 APIError(400, message, param='top_k')。"),
    # ch10.py:136
    ("keep a bytes buffer across reads and cut events at b'\\n\\n' before decoding (a "
     "read may end inside a UTF-8 character); skip lines that do not start with "
     "'data: ' (': ping' is a comment); 'data: [DONE]' ends the stream; a chunk with "
     "no choices adds nothing; an error event, or a stream that ends before [DONE], "
     "raises RuntimeError."):
        ("在多次读取之间保留一个 bytes 缓冲区，先按 b'\\n\\n' 切出事件再解码"
         "（一次读取可能在某个 UTF-8 字符的中间结束）；跳过不以 'data: ' 开头的行"
         "（': ping' 是注释）；'data: [DONE]' 表示流结束；没有 choices 的块不贡献文本；"
         "遇到错误事件，或流在 [DONE] 之前就结束了，都抛出 RuntimeError。"),
    # ch10.py:184
    ("each message is '<|im_start|>' + role + '\\n' + content + '<|im_end|>\\n'; a "
     "list of text parts is their texts joined by '\\n', None is ''; the generation "
     "prompt, only if asked, is '<|im_start|>assistant\\n'."):
        ("每条消息是 '<|im_start|>' + role + '\\n' + content + '<|im_end|>\\n'；"
         "文本片段列表按 '\\n' 连接成一个字符串，None 记作 ''；"
         "只有要求时才追加生成提示 '<|im_start|>assistant\\n'。"),
    # ch09.py:168
    ("with no budget return needs as they are; else give every decoding request (need "
     "1) its token first, raise ValueError if the budget cannot cover them, then walk "
     "the prefilling requests oldest first, each taking min(need, what is left)."):
        ("没有预算时原样返回 needs；否则先给每个正在解码的请求（need 为 1）"
         "分一个词元，预算不够分给它们时抛出 ValueError；然后从最早的开始"
         "依次处理正在预填充的请求，每个取 min(need, 剩余预算)。"),
    # ch09.py:208
    ("loop while the new blocks of the requests still running exceed free: take the "
     "last of them (the most recently admitted, whatever it needs), add its held "
     "blocks to free, drop its new blocks from the sum; when only one is left and it "
     "still does not fit, raise RuntimeError."):
        ("只要仍在运行的请求所需的新块总数超过 free 就继续循环：取其中最后一个"
         "（最近接纳的那个，不管它需要多少块），把它持有的块加回 free，"
         "并从总数中去掉它所需的新块；只剩一个请求却仍放不下时，"
         "抛出 RuntimeError。"),
    # ch09.py:248
    ("count the tokens the two prompts share from the start; only whole blocks of "
     "that prefix match (a block's hash chains every block before it), only blocks "
     "first filled completely, and second looks up only (len(second) - 1) // "
     "block_size blocks: its last token is always computed."):
        ("数出两个提示词从开头起相同的词元数；只有这段公共前缀中的完整块才能命中"
         "（块的哈希串联了它之前的每一个块），且只有 first 中被完全填满的块"
         "才会缓存；second 只查找 (len(second) - 1) // block_size 个块："
         "它的最后一个词元总是要计算。"),
    # ch11.py:24
    ("guess i survives only if guesses 1..i all do: probability alpha**i; add the "
     "one token the target always contributes (alpha = 1: k + 1)."):
        ("只有猜测 1..i 全都被保留，猜测 i 才会被保留：其概率为 alpha**i；"
         "再加上目标模型总会补上的那一个词元（alpha = 1 时为 k + 1）。"),
    # ch11.py:43
    ("walk the guesses in order and stop at the first one that differs from the "
     "target's choice; the next token is the target's choice at that position."):
        ("按顺序检查各个猜测，在第一个与目标模型的选择不同的猜测处停下；"
         "下一个词元是目标模型在该位置的选择。"),
    # ch11.py:71
    ("clamp p - q at 0, then divide by its sum; if the sum is 0 the two "
     "distributions are equal, so return p."):
        ("把 p - q 中小于 0 的部分截为 0，再除以它的和；如果和为 0，"
         "说明两个分布相同，直接返回 p。"),
    # ch11.py:97
    ("for each k, expected tokens per round (1 + alpha + ... + alpha**k) divided by "
     "the round's time, k draft steps plus t_pass[k + 1]; k = 0 is one token per "
     "t_pass[1]; keep the smallest k among equal rates."):
        ("对每个 k，用每轮的期望词元数 (1 + alpha + ... + alpha**k) "
         "除以这一轮的时间，即 k 个草稿步加上 t_pass[k + 1]；"
         "k = 0 是每 t_pass[1] 产出一个词元；速率相同时取最小的 k。"),
    # ch12.py:37
    "turn t sends the system prompt, t questions and t - 1 answers; add up the turns.":
        "第 t 轮发送系统提示、t 个问题和 t - 1 个回答；把各轮加起来。",
    # ch12.py:52
    ("start from the pinned messages' tokens, walk from the newest message back and "
     "stop at the first that would overflow; return sorted indices."):
        ("从固定保留的消息的词元数开始累计，从最新的消息往前走，"
         "遇到第一条会超出预算的消息就停止；返回按升序排列的下标。"),
    # ch12.py:66
    ("cached = whole blocks of the shared part, and never the last prompt token; the "
     "rest is prefilled at per_token seconds each, plus the overhead."):
        ("cached = 共享部分中的整块，且永远不包括提示词的最后一个词元；"
         "其余词元做预填充，每个耗时 per_token 秒，再加上 overhead。"),
    # chA.py:31
    ("keep a count `scored` of the targets done (ids[1:scored + 1]); the next window "
     "ends at end = min(scored + seq_len for the first window, else scored + stride, "
     "n_ids - 1), starts at max(0, end - seq_len), and scores from index scored - "
     "start on."):
        ("用计数 `scored` 记录已打分的目标（ids[1:scored + 1]）；"
         "下一个窗口结束于 end = min(scored + seq_len（第一个窗口）"
         "或 scored + stride（其余窗口）, n_ids - 1)，起始于 max(0, end - seq_len)，"
         "并从下标 scored - start 起打分。"),
    # chA.py:54
    "warm-up reaches peak at step warmup-1; progress = (step-warmup)/(steps-warmup).":
        "预热在第 warmup-1 步达到 peak；progress = (step-warmup)/(steps-warmup)。",
    # chA.py:74
    "every 5th of the sorted names, starting with the first: {'abc', 'json', 'xml'}":
        "排序后的名字从第一个开始每 5 个取一个：{'abc', 'json', 'xml'}",
    # chA.py:76
    "the answer must not depend on the input order":
        "结果不得依赖输入的顺序",
    # chA.py:78
    "every=1 holds out everything":
        "every=1 时全部留出",
    # chA.py:79
    "the input list must not be modified":
        "不得修改输入列表",
    # chB.py:38
    "q, k and v of sizes 8, 4, 4 with biases: one product, outputs in that order":
        "大小分别为 8、4、4 且带偏置的 q、k、v：只做一次矩阵乘法，输出按这个顺序排列",
    # chB.py:40
    "gate and up of size 12 without bias: bias must be None":
        "大小都为 12 且不带偏置的 gate 和 up：bias 必须是 None",
    # chB.py:42
    "a single layer stacks to itself":
        "只有一层时，堆叠的结果就是它自己",
    # chB.py:65
    "one head, one key/value head, 5 slots (plain attention)":
        "一个头、一个键/值头、5 个槽位（普通注意力）",
    # chB.py:67
    "4 heads, 4 key/value heads (multi-head)":
        "4 个头、4 个键/值头（多头注意力）",
    # chB.py:68
    "8 heads sharing 2 key/value heads: heads 0-3 read kv head 0, 4-7 kv head 1":
        "8 个头共享 2 个键/值头：头 0-3 读取 kv 头 0，头 4-7 读取 kv 头 1",
    # chB.py:70
    "scores are scaled by 1 / sqrt(head_dim) before the softmax":
        "softmax 之前，注意力分数要乘以 1 / sqrt(head_dim) 做缩放",
    # chB.py:91
    ("a window of w covers the new token and the w - 1 before it; never start below "
     "slot 0, and stop before the new position."):
        ("大小为 w 的窗口覆盖新词元及其之前的 w - 1 个位置；起点绝不低于槽位 0，"
         "并在新位置之前停止。"),
    # chC.py:59
    "codes are an integer tensor (e.g. torch.uint8), one code per value":
        "codes 是整数张量（例如 torch.uint8），每个值对应一个码",
    # chC.py:61
    ("the scale is the largest |value| / 7: 2.1 / 7 = 0.3 here, where the largest "
     "magnitude is negative"):
        "scale 是最大的 |值| / 7：这里是 2.1 / 7 = 0.3，绝对值最大的那个值是负数",
    # chC.py:63
    "codes are round(v / scale) + 8, so that zero is code 8":
        "codes 是 round(v / scale) + 8，于是 0 对应码 8",
    # chC.py:65
    "(codes - 8) * scale is within scale / 2 of every value of a random group":
        "对一个随机组，(codes - 8) * scale 与每个值相差不超过 scale / 2",
    # chC.py:67
    "an all-zero group divides by no zero: a finite scale and every code 8":
        "全零的组不能除以零：scale 是有限数，每个码都是 8",
    # chC.py:69
    ("with a given scale of 0.25, 3.0 and -4.0 clip to codes 15 and 0 (codes stay in "
     "0..15)"):
        ("给定 scale 为 0.25 时，3.0 和 -4.0 分别截断为码 15 和 0"
         "（码始终在 0..15 之内）"),
    # chC.py:110
    ("int8 adds a scale per row; int4 is half a byte a weight over a row padded to "
     "whole groups, plus a scale per group of each row."):
        ("int8 每行多一个 scale；int4 每个权重占半个字节，每行先补齐到整数个组，"
         "每行的每个组再加一个 scale。"),
    # chC.py:131
    ("each step takes fixed_s + bytes / bandwidth; the speed-up is the old step's time "
     "over the new one's."):
        ("每一步耗时 fixed_s + bytes / bandwidth；加速比是旧一步的耗时除以新一步的"
         "耗时。"),
    # chD.py:73
    "world=3 gives a list of 3 partial outputs, each (batch, out) = (3, 6)":
        "world=3 时返回 3 个部分输出组成的列表，每个形状都是 (batch, out) = (3, 6)",
    # chD.py:75
    ("the partial outputs of 2 ranks add up to the unsharded silu(x @ w_up.T) @ "
     "w_down.T"):
        "2 个 rank 的部分输出相加，等于不分片的 silu(x @ w_up.T) @ w_down.T",
    # chD.py:77
    "the partial outputs of 3 ranks add up to the unsharded product":
        "3 个 rank 的部分输出相加，等于不分片的乘积",
    # chD.py:79
    ("rank r holds rows 4r .. 4r + 3 of w_up and the same columns of w_down (a "
     "contiguous block each, as llmcore's shard_slice cuts them)"):
        ("rank r 持有 w_up 的第 4r .. 4r + 3 行和 w_down 的相同几列"
         "（各是一个连续的块，与 llmcore 的 shard_slice 切法相同）"),
    # chD.py:82
    "one rank's only partial output is the whole product":
        "只有一个 rank 时，它唯一的部分输出就是完整的乘积",
    # chD.py:83
    "world=5 does not divide the 12 hidden units: raise ValueError":
        "world=5 不能整除 12 个隐藏单元：必须抛出 ValueError",
    # chD.py:85
    "w_up, w_down and x are left as they were":
        "w_up、w_down 和 x 保持原样，不被修改",
    # chD.py:110
    ("each block all-reduces twice (after attention, after the MLP) and the embedding "
     "once more, dim values per sequence each time, dtype_bytes a value."):
        ("每个块做两次全归约（注意力之后、MLP 之后），嵌入层再做一次，"
         "每次每个序列 dim 个值，每个值 dtype_bytes 字节。"),
    # chD.py:150
    ("try N = 1, 2, ..., 8 in order; skip an N that does not divide the KV heads; N "
     "fits when params_billion * dtype_bytes / N + kv_reserve_gb <= gpu_gb; raise "
     "ValueError when no N up to 8 fits."):
        ("按顺序试 N = 1, 2, ..., 8；跳过不能整除 KV 头数的 N；"
         "当 params_billion * dtype_bytes / N + kv_reserve_gb <= gpu_gb 时 N 放得下；"
         "到 8 为止都放不下就抛出 ValueError。"),
    # chE.py:76
    ("one block from the empty state: m is its largest score, l = sum exp(s - m) and "
     "acc / l = softmax(scores) @ values"):
        ("从空状态读入一块：m 是这块最大的分数，l = sum exp(s - m)，"
         "acc / l = softmax(scores) @ values"),
    # chE.py:79
    ("three blocks, each with a larger maximum than the last: acc / l = softmax(all "
     "scores) @ values (rescale l and acc by exp(m - m'))"):
        ("三块分数，每块的最大值都比前一块大：acc / l = softmax(全部分数) @ values"
         "（l 和 acc 都要乘以 exp(m - m') 重新缩放）"),
    # chE.py:82
    ("a block whose maximum is lower than the running one: the running maximum stays, "
     "and the new terms are taken against it"):
        "一块的最大值低于当前的运行最大值：运行最大值不变，新的各项都相对它来算",
    # chE.py:85
    "blocks with -inf (masked) scores among finite ones: a masked score adds nothing":
        "有限分数中夹着 -inf（被掩码）的分数：被掩码的分数什么也不加",
    # chE.py:88
    ("a block of only -inf scores from the empty state leaves it as it was: m = -inf, "
     "l = 0, acc = 0 (no nan)"):
        ("从空状态读入一块全是 -inf 的分数，状态保持不变：m = -inf，l = 0，acc = 0"
         "（不能出现 nan）"),
    # chE.py:90
    ("a block of only -inf scores first, then a finite one: the result is the softmax "
     "over the finite scores"):
        "先读入一块全是 -inf 的分数，再读入有限的一块：结果是对有限分数的 softmax",
    # chE.py:93
    "scores near 1000 (exp(1000) overflows): subtract the running maximum before exp":
        "分数接近 1000（exp(1000) 会溢出）：取 exp 之前先减去运行最大值",
    # chE.py:96
    "blocks of one score each, the largest in the middle":
        "每块只有一个分数，最大的在中间",
    # chE.py:125
    ("the diagonal tile of 8 queries and 8 keys in tiles of 4, at (0, 0): a (4, 4) "
     "bool tensor, query i sees keys 0 .. i (its own key included)"):
        ("8 个查询、8 个键、块大小为 4 时位于 (0, 0) 的对角块：一个 (4, 4) 的布尔张量，"
         "查询 i 能看到键 0 .. i（包括它自己的键）"),
    # chE.py:128
    "the second diagonal tile, at (4, 4): the same lower triangle":
        "位于 (4, 4) 的第二个对角块：同样的下三角",
    # chE.py:130
    "the tile below the diagonal, at (4, 0): every query sees every key":
        "位于 (4, 0) 的对角线下方的块：每个查询都能看到每个键",
    # chE.py:132
    "the tile above the diagonal, at (0, 4): no query sees any key":
        "位于 (0, 4) 的对角线上方的块：没有查询能看到任何键",
    # chE.py:134
    ("4 queries that are the last of 10 keys (offset 6), keys 4 .. 7: query i sees key "
     "j when j <= i + 6"):
        ("4 个查询是 10 个键中的最后 4 个（偏移 6），键 4 .. 7："
         "当 j <= i + 6 时查询 i 能看到键 j"),
    # chE.py:136
    ("6 queries and 6 keys in tiles of 4, at (4, 4): the rows of queries 6 and 7 and "
     "the columns of keys 6 and 7 are past the ends, all False"):
        ("6 个查询、6 个键、块大小为 4 时位于 (4, 4) 的块：查询 6 和 7 的行、"
         "键 6 和 7 的列都超出了末尾，全为 False"),
    # chE.py:139
    ("2 queries that are the last of 13 keys, tiles of 2 x 8 at (0, 8): query 0 sees "
     "keys 8 .. 11, query 1 keys 8 .. 12, keys 13 .. 15 do not exist"):
        ("2 个查询是 13 个键中的最后 2 个，2 x 8 的块位于 (0, 8)：查询 0 能看到键 "
         "8 .. 11，查询 1 能看到键 8 .. 12，键 13 .. 15 不存在"),
    # chE.py:142
    ("one decode query after 5 keys, a tile of 4 x 4 at (0, 0): row 0 all True, rows "
     "1 .. 3 (no such queries) all False"):
        ("5 个键之后的一个解码查询，4 x 4 的块位于 (0, 0)：第 0 行全为 True，"
         "第 1 .. 3 行（没有这些查询）全为 False"),
    # chE.py:172
    ("per head, naive moves Q, K, V and O (seq x head_dim each) and S and P (seq x seq "
     "each) twice, written then read; flash moves Q and O once and K and V once per "
     "query tile, ceil(seq / block_q) tiles; all times batch * heads * dtype_bytes."):
        ("每个头：朴素做法搬运 Q、K、V 和 O（各 seq x head_dim）各一次，"
         "S 和 P（各 seq x seq）各两次，先写后读；FlashAttention 搬运 Q 和 O 各一次，"
         "K 和 V 每个查询块一次，共 ceil(seq / block_q) 块；"
         "全部再乘以 batch * heads * dtype_bytes。"),
}
