"""Per-chapter answers for the exercise checkers: each module defines ANSWERS =
{checker name: (a correct answer, [wrong answers it must reject])}."""
