#include <cstdio>
int main() { std::puts("llmplan"); return 0; }
