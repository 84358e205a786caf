package symname

import (
	"strings"
	"testing"
)

// Names as the H100 captures carry them (the JAX program's stream_executor
// kernels, PyTorch's elementwise kernels, clang's lambda symbols) and
// their full and short forms.
func TestNames(t *testing.T) {
	for _, tc := range []struct{ name, full, short string }{
		// An anonymous namespace's parentheses are part of the name, not
		// its parameter list (the report once showed "stream_executor::gpu::").
		{"_ZN15stream_executor3gpu56_GLOBAL__N__0adca48f_23_delay_kernel_cuda_cu_cc_a9426d2111DelayKernelEPVNS_17GpuSemaphoreStateES2_",
			"stream_executor::gpu::(anonymous namespace)::DelayKernel(stream_executor::GpuSemaphoreState volatile*, stream_executor::GpuSemaphoreState)",
			"stream_executor::gpu::(anonymous namespace)::DelayKernel"},
		// The same name arriving already demangled.
		{"stream_executor::gpu::(anonymous namespace)::DelayKernel(stream_executor::GpuSemaphoreState volatile*, stream_executor::GpuSemaphoreState)",
			"stream_executor::gpu::(anonymous namespace)::DelayKernel(stream_executor::GpuSemaphoreState volatile*, stream_executor::GpuSemaphoreState)",
			"stream_executor::gpu::(anonymous namespace)::DelayKernel"},
		{"_ZN15stream_executor3gpu26RedzoneAllocatorKernelImplEPhhmPj",
			"stream_executor::gpu::RedzoneAllocatorKernelImpl(unsigned char*, unsigned char, unsigned long, unsigned int*)",
			"stream_executor::gpu::RedzoneAllocatorKernelImpl"},
		// Short template arguments stay; the return type goes.
		{"_Z1kIfEvPT_i", "void k<float>(float*, int)", "k<float>"},
		{"void k<float>(float*, int)", "void k<float>(float*, int)", "k<float>"},
		// Long ones are elided, innermost first, then outermost.
		{"_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEENS_6detail5ArrayIPcLi3EEEEEviT0_T1_",
			"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
			"at::native::vectorized_elementwise_kernel<…>"},
		// clang's lambda names hold '$': one symbol, kept whole.
		{"_ZNSt17_Function_handlerIFvvEZN3xla3FooEvE3$_0E9_M_invokeERKSt9_Any_data",
			"std::_Function_handler<void (), xla::Foo()::$_0>::_M_invoke(std::_Any_data const&)",
			"std::_Function_handler<void (), xla::Foo()::$_0>::_M_invoke"},
		{"_ZZN3xla3BarEvENK3$_1clEv", "xla::Bar()::$_1::operator()() const", "xla::Bar()::$_1::operator()"},
		{"xla::Bar()::$_1::operator()() const", "xla::Bar()::$_1::operator()() const", "xla::Bar()::$_1::operator()"},
		{"_ZN3fooltERKS_S1_", "foo::operator<(foo const&, foo const&)", "foo::operator<"},
		// nvdisasm's inlined body of helper in reload.
		{"$_Z6reloadPKfPfii$_Z6helperPKfi", "$_Z6reloadPKfPfii$_Z6helperPKfi", "reload > helper"},
		{"_Z10stencil_2dPKfPfii", "stencil_2d(float const*, float*, int, int)", "stencil_2d"},
		{"_Z5saxpyIfEvT_PKS0_PS0_i", "void saxpy<float>(float, float const*, float*, int)", "saxpy<float>"},
		{"_ZN2ns6kernelEv", "ns::kernel()", "ns::kernel"},
		{"_ZN6thrust8cuda_cub4core13_kernel_agentEv", "thrust::cuda_cub::core::_kernel_agent()", "thrust::cuda_cub::core::_kernel_agent"},
		{"main", "main", "main"},
		// Plain names (XLA's fusions, extern "C" kernels) stay as they are.
		{"gemm_fusion_dot_general_1", "gemm_fusion_dot_general_1", "gemm_fusion_dot_general_1"},
		{"_Z6kernel0i", "_Z6kernel0i", "_Z6kernel0i"}, // not a valid mangling: kept
	} {
		if got := Demangle(tc.name); got != tc.full {
			t.Errorf("Demangle(%q) = %q, want %q", tc.name, got, tc.full)
		}
		got := Short(tc.name)
		if got != tc.short {
			t.Errorf("Short(%q) = %q, want %q", tc.name, got, tc.short)
		}
		if LastComponent(got) == "" {
			t.Errorf("Short(%q) = %q ends in an empty component", tc.name, got)
		}
	}
}

func TestElideTemplates(t *testing.T) {
	s := "a::b<c<int>, d<e<f> > >::g<h>"
	for depth, want := range map[int]string{
		1: "a::b<…>::g<…>",
		2: "a::b<c<…>, d<…> >::g<h>",
		3: "a::b<c<int>, d<e<…> > >::g<h>",
	} {
		if got := ElideTemplates(s, depth); got != want {
			t.Errorf("depth %d: %q, want %q", depth, got, want)
		}
	}
	// Operator names are no brackets.
	if got := ElideTemplates("x::operator< <long>", 1); got != "x::operator< <…>" {
		t.Errorf("operator<: %q", got)
	}
}

// No input makes Short return an empty last component or panic.
func FuzzShort(f *testing.F) {
	for _, s := range []string{"ns::(anonymous namespace)::K(int)", "a::operator()()", "(", ")::", "x<", "operator", "$_Z1a$_Z1b", "_ZN1a1bE"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Short(s)
		if strings.TrimSpace(s) != "" && got == "" {
			t.Fatalf("Short(%q) is empty", s)
		}
	})
}
